//! A build without cargo feature `compare` (the operator's build): `tidemark compare` is refused
//! with how to get it, and the help does not offer it.

use crate::support::tidemark;

#[test]
fn compare_is_refused_with_how_to_build_it() {
    let run = tidemark(&["compare", "--duration", "1s"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr
            .starts_with("tidemark: this build has no `compare`")
            && run.stderr.contains("feature `compare`"),
        "{run:?}"
    );
    assert!(run.stdout.is_empty(), "{run:?}");
    let help = tidemark(&["--help"]);
    assert_eq!(help.code, Some(0), "{help:?}");
    assert!(!help.stdout.contains("compare"), "{help:?}");
}
