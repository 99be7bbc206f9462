//! The client names and routes a partitioned queue's partitions as the module does: every line
//! of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot) and of
//! shares.tsv (width, index, first slot, the slot past the last).

use echomq_client::partition::{name, route, share, MAX_NAME_LEN};
use echomq_client::slot::slot;

/// The lines of testing/vectors/`file`, split at tabs, comments left out.
fn vectors(file: &str) -> Vec<Vec<String>> {
    let path = format!(
        "{}/../../testing/vectors/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("the vectors");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

#[test]
fn every_vector_routes_and_names_as_the_module_does() {
    let lines = vectors("partitions.tsv");
    assert_eq!(lines.len(), 108);
    for f in &lines {
        let width: u16 = f[1].parse().expect("width");
        let index = route(width, &f[2]);
        assert_eq!(index.to_string(), f[3], "{f:?}");
        let named = name(&f[0], index, width).expect("a name");
        assert_eq!(named, f[4], "{f:?}");
        assert_eq!(slot(&named).to_string(), f[5], "{f:?}");
    }
}

#[test]
fn every_share_is_the_module_s() {
    let lines = vectors("shares.tsv");
    assert_eq!(lines.len(), 1142);
    for f in &lines {
        let n: Vec<u16> = f.iter().map(|v| v.parse().expect("a number")).collect();
        assert_eq!(share(n[1], n[0]), Some(n[2]..n[3]), "{f:?}");
    }
}

#[test]
fn a_name_that_is_no_queue_name_a_width_out_of_range_or_an_index_past_it_has_no_partition() {
    let longest = "q".repeat(MAX_NAME_LEN);
    assert!(name(&longest, 1023, 1024).is_some_and(|n| n.len() <= 128));
    assert_eq!(name(&"q".repeat(MAX_NAME_LEN + 1), 0, 2), None);
    assert_eq!(name("a{b}c", 0, 2), None);
    assert_eq!(name("", 0, 2), None);
    assert_eq!(name("q", 0, 0), None);
    assert_eq!(name("q", 0, 1025), None);
    assert_eq!(name("q", 3, 3), None);
}
