//! Schemathesis at length: every operation of every service, from its OpenAPI document, many
//! examples each, against one local server (embedded backend, in process); prints operations,
//! requests and failures per service (all failures must be 0). The bounded run is the
//! black-box test `openapi::schemathesis_finds_nothing_on_any_service`.
//!
//! Run (the venv of scripts/test.sh, with schemathesis):
//!   TCQ_PYTHON=$PWD/target/py-venv/bin/python cargo bench -p blackbox --bench schemathesis
//!
//! Knobs: `BENCH_EXAMPLES` (100 per operation), `BENCH_SEED` (20261126).

use blackbox::schemathesis::{print, python, run, Budget};
use blackbox::{env_num, spawn_app_with};

#[tokio::main]
async fn main() {
    let Some(python) = python() else {
        std::process::exit(2);
    };
    let budget = Budget {
        max_examples: env_num("BENCH_EXAMPLES", 100),
        seed: env_num("BENCH_SEED", 20261126),
    };
    let app = spawn_app_with(|c| c.queue.claim_work_timeout_ms = 200).await;
    let mut outcomes = vec![];
    for service in shared::api::SERVICES {
        let o = run(&python, &app.root_url(), service, budget).await;
        if !o.passed {
            eprintln!("{}", o.output);
        }
        outcomes.push(o);
    }
    println!(
        "schemathesis, {} examples per operation, seed {}:",
        budget.max_examples, budget.seed
    );
    print!("{}", print(&outcomes));
    if outcomes.iter().any(|o| !o.passed) {
        std::process::exit(1);
    }
}
