//! `#[sandbench_testkit::test]`: the test attribute of sandbench's
//! integration tests (`crates/sandbench/tests/it`, a `harness = false`
//! binary driven by libtest-mimic). Each test is registered (with
//! `inventory`) together with what it needs — tiers, root, tools — so the
//! harness can decide before running it whether it can run here, and show it
//! as *ignored* when it cannot. libtest has no way to ignore a test at run
//! time; an early `return` showed as "ok", which is what this replaces.
//!
//! ```ignore
//! #[sandbench_testkit::test]
//! fn plain() {}
//! #[sandbench_testkit::test(needs = ["docker", "root"])]
//! async fn on_a_current_thread_runtime() {}
//! #[sandbench_testkit::test(needs = "process", flavor = "multi_thread")]
//! async fn on_two_worker_threads() {}
//! ```
//! The generated code refers to `crate::support::harness::{Case, register}`
//! in the test crate.

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprArray, ExprLit, ItemFn, Lit, Meta, Token};

#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn strings(e: &Expr) -> syn::Result<Vec<String>> {
    match e {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Ok(vec![s.value()]),
        Expr::Array(ExprArray { elems, .. }) => elems.iter().map(|x| strings(x).map(|v| v[0].clone())).collect(),
        other => Err(syn::Error::new_spanned(other, "expected a string or an array of strings")),
    }
}

fn expand(attr: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> syn::Result<proc_macro2::TokenStream> {
    let args = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(attr)?;
    let mut needs: Vec<String> = vec![];
    let mut multi_thread = false;
    for a in &args {
        let Meta::NameValue(nv) = a else {
            return Err(syn::Error::new_spanned(a, "expected `needs = ...` or `flavor = \"multi_thread\"`"));
        };
        if nv.path.is_ident("needs") {
            needs.extend(strings(&nv.value)?);
        } else if nv.path.is_ident("flavor") {
            multi_thread = strings(&nv.value)? == ["multi_thread"];
        } else {
            return Err(syn::Error::new_spanned(&nv.path, "unknown argument (known: needs, flavor)"));
        }
    }
    let mut f: ItemFn = syn::parse2(item)?;
    if !f.sig.inputs.is_empty() {
        return Err(syn::Error::new_spanned(&f.sig.inputs, "a test takes no arguments"));
    }
    let name = f.sig.ident.clone();
    let (body_fn, runner) = if f.sig.asyncness.is_some() {
        // The async body becomes an inner fn, driven on a fresh runtime.
        let inner = format_ident!("__{}_body", name);
        f.sig.ident = inner.clone();
        let rt = if multi_thread {
            quote!(::tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        } else {
            quote!(::tokio::runtime::Builder::new_current_thread())
        };
        let wrapper = quote! {
            fn #name() {
                #rt.enable_all().build().expect("a tokio runtime for the test").block_on(#inner())
            }
        };
        (quote!(#f #wrapper), name.clone())
    } else {
        (quote!(#f), name.clone())
    };
    Ok(quote! {
        #body_fn
        ::inventory::submit! {
            crate::support::harness::Case {
                module: module_path!(),
                name: stringify!(#name),
                needs: &[#(#needs),*],
                run: #runner,
            }
        }
    })
}
