// name: js-hello
// tries: print a line
// must: run it
// expect: *=ok
// delivers: "hello from node"
console.log("hello from node");
