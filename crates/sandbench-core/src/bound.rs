//! The bounds of the judges' sources (issue 42, "every bound fails
//! closed"): what a walk, a watch or a guest's scan did not look at. Plain
//! types, below the judge that words them and the sources that hit them
//! (`highwater`, `fsafe`'s walks, the guests' frames).

/// A bound one of the judge's sources hit: what it did not look at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BoundHit {
    pub bound: Bound,
    /// The bound's value (entries, levels); None when it has none.
    pub limit: Option<u64>,
    /// Which source, and where (`loader walk of /work`).
    pub at: String,
}

impl BoundHit {
    pub(crate) fn new(bound: Bound, limit: Option<u64>, at: impl Into<String>) -> BoundHit {
        BoundHit { bound, limit, at: at.into() }
    }

    /// The hits a walk's end stands for.
    pub(crate) fn of_walk(end: &crate::fsafe::WalkEnd, walk: crate::fsafe::Walk, at: &str) -> Vec<BoundHit> {
        let mut v = vec![];
        if end.whole() {
            return v;
        }
        if end.entries {
            v.push(BoundHit::new(Bound::ScratchWalkEntries, Some(walk.max_entries as u64), at));
        }
        if end.depth {
            v.push(BoundHit::new(Bound::ScratchWalkDepth, Some(walk.max_depth as u64), at));
        }
        if end.unreadable > 0 {
            v.push(BoundHit::new(Bound::ScratchWalkUnreadable, None, at));
        }
        v
    }

    /// A hit as a guest or container judge words it: `NAME:LIMIT:WHERE`
    /// (LIMIT empty when none). A name this build does not know still
    /// counts (as `judge_bound`): a bound never reads as nothing.
    pub(crate) fn parse(text: &str) -> BoundHit {
        let mut it = text.splitn(3, ':');
        let bound = it.next().and_then(|b| b.parse().ok()).unwrap_or(Bound::Unnamed);
        let limit = it.next().and_then(|l| l.parse().ok());
        let at = crate::sanitize::inert_line(it.next().unwrap_or("?"), 120);
        BoundHit { bound, limit, at }
    }
}

/// The bounds of the judges' sources (stable names, in reports).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, strum::IntoStaticStr, strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub(crate) enum Bound {
    /// A scratch walk reached its entry budget with entries left.
    ScratchWalkEntries,
    /// A scratch walk did not enter directories below its depth bound.
    ScratchWalkDepth,
    /// A scratch walk could not open or list a directory.
    ScratchWalkUnreadable,
    /// The scratch watch lost file events (queue overflow, no descriptor
    /// for an event's file).
    FileEventsLost,
    /// A judge in a guest or container named a bound this build does not
    /// know (`judge_bound` in reports).
    #[serde(rename = "judge_bound")]
    #[strum(serialize = "judge_bound")]
    Unnamed,
}

impl Bound {
    pub(crate) fn name(self) -> &'static str {
        self.into()
    }

    /// What went unseen, in words.
    pub(crate) fn detail(self, limit: Option<u64>, at: &str) -> String {
        let n = limit.map(|l| l.to_string()).unwrap_or_else(|| "?".into());
        match self {
            Bound::ScratchWalkEntries => {
                format!("{at} stopped after {n} names: a file at the size limit past them would go unseen")
            }
            Bound::ScratchWalkDepth => {
                format!("{at} did not go below {n} levels: a file at the size limit deeper would go unseen")
            }
            Bound::ScratchWalkUnreadable => {
                format!("{at} could not open a directory: a file at the size limit in it would go unseen")
            }
            Bound::FileEventsLost => format!("{at} lost file events: a file at the size limit may have gone unseen"),
            Bound::Unnamed => format!("{at} stopped short of what it had to look at"),
        }
    }
}
