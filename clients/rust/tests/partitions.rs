//! The client names and routes a partitioned queue's partitions as the module does: every line
//! of testing/vectors/partitions.tsv (queue, width, id or group, partition, name, slot).

use echomq_client::partition::{name, route};
use echomq_client::slot::slot;

#[test]
fn every_vector_routes_and_names_as_the_module_does() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testing/vectors/partitions.tsv"
    );
    let vectors = std::fs::read_to_string(path).expect("testing/vectors/partitions.tsv");
    let mut lines = 0;
    for line in vectors.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        let width: u16 = f[1].parse().expect("width");
        let index = route(width, f[2]);
        assert_eq!(index.to_string(), f[3], "{line}");
        let named = name(f[0], index, width).expect("a name");
        assert_eq!(named, f[4], "{line}");
        assert_eq!(slot(&named).to_string(), f[5], "{line}");
        lines += 1;
    }
    assert_eq!(lines, 108);
}
