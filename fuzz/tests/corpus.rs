//! Every fuzz target over its corpus (`corpus/<target>/`, seeded from the bundled fixtures by
//! `seeds.rs`), its past failures (`regressions/<target>/`), then a fixed series of seeded
//! mutations of them: the targets' properties checked on every `cargo test --workspace`.

use linkerd_fuzz::mutate::{Rng, mutate};
use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
};

/// Mutations run per target: enough to leave the corpus, few enough for a debug build.
const MUTATIONS: usize = 400;

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a corpus file reads");
            (path, bytes)
        })
        .collect()
}

/// The text of a caught panic.
fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn run(name: &str, target: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = inputs(&root.join("corpus").join(name));
    assert!(
        corpus.len() >= 5,
        "corpus/{name} holds {} inputs; run `cargo test -p linkerd-fuzz --test seeds -- --ignored`",
        corpus.len()
    );
    let regressions = inputs(&root.join("regressions").join(name));
    for (path, bytes) in corpus.iter().chain(&regressions) {
        if let Err(panic) = catch_unwind(|| target(bytes)) {
            panic!("{name}: {} fails: {}", path.display(), message(&*panic));
        }
    }
    let mut rng = Rng::new(0x5EED ^ name.len() as u64);
    let mut pool: Vec<Vec<u8>> = corpus.into_iter().map(|(_, b)| b).collect();
    for i in 0..MUTATIONS {
        let input = &pool[rng.below(pool.len())];
        let other = &pool[rng.below(pool.len())];
        let mut mutant = mutate(&mut rng, input, other);
        for _ in 0..rng.below(4) {
            mutant = mutate(&mut rng, &mutant, other);
        }
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&mutant))) {
            panic!(
                "{name}: mutation {i} fails ({}); save it under regressions/{name}/ to keep it: {:?}",
                message(&*panic),
                String::from_utf8_lossy(&mutant)
            );
        }
        if i % 8 == 0 {
            pool.push(mutant);
        }
    }
}

macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name), linkerd_fuzz::$name);
            }
        )*

        #[test]
        fn every_target_is_tested_here() {
            let here = [$(stringify!($name)),*];
            let all: Vec<&str> = linkerd_fuzz::TARGETS.iter().map(|t| t.name).collect();
            assert_eq!(all, here);
        }
    };
}

targets!(
    get_path,
    inbound_port_spec,
    outbound_traffic_spec,
    state_file,
    sp_admission,
    policy_admission,
    port_list,
    label_selector,
    route_match,
);
