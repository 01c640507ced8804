//! Routing keys (`shared::routing`) from arbitrary words, and from words shaped as the
//! schemas allow them. Properties, as seeds 000, 001 and 003 lay the keys out:
//! - any words: no panic; primary keys start `primary.` and end in the reserved `._`;
//!   CC keys are `route.<r>`, one per route, never mistakable for a primary key;
//! - valid words (taskId and taskGroupId slugids, identifiers of at most 38 characters,
//!   runId below the run limit): the task key has exactly its ten words in place, `_` for
//!   the absent ones; the group key its four; the graph key nine fixed words then the
//!   graph's routing; the legacy key its six task words then the task's routing;
//! - and every key fits AMQP's 255-byte routing key (a longer one cannot be published).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use shared::records::task::MAX_RUNS;
use shared::routing::{
    legacy_routing_key, route_ccs, task_graph_route, task_graph_routing_key,
    task_group_routing_key, task_routing_key, TaskKey,
};
use shared_fuzz::{word_from, Shape, Word};

/// AMQP 0-9-1 routing keys are short strings.
const MAX_KEY: usize = 255;

fn or_(w: Option<&str>) -> &str {
    match w {
        Some(s) if !s.is_empty() => s,
        _ => "_",
    }
}

fn words(key: &str) -> Vec<&str> {
    key.split('.').collect()
}

fn run(u: &mut Unstructured) -> arbitrary::Result<()> {
    let task_id = Shape::Slugid.word(u)?;
    let run_id: Option<u32> = match u.int_in_range(0..=3u8)? {
        0 => None,
        1 => Some(u32::arbitrary(u)?),
        _ => Some(u.int_in_range(0..=MAX_RUNS as u32 - 1)?),
    };
    let worker_group = Option::<()>::arbitrary(u)?
        .map(|_| Shape::Identifier.word(u))
        .transpose()?;
    let worker_id = Option::<()>::arbitrary(u)?
        .map(|_| Shape::Identifier.word(u))
        .transpose()?;
    let provisioner_id = Shape::Identifier.word(u)?;
    let worker_type = Shape::WorkerType.word(u)?;
    let scheduler_id = Shape::Identifier.word(u)?;
    let task_group_id = Shape::Slugid.word(u)?;
    let k = TaskKey {
        task_id: &task_id.text,
        run_id,
        worker_group: worker_group.as_ref().map(|w| w.text.as_str()),
        worker_id: worker_id.as_ref().map(|w| w.text.as_str()),
        provisioner_id: &provisioner_id.text,
        worker_type: &worker_type.text,
        scheduler_id: &scheduler_id.text,
        task_group_id: &task_group_id.text,
    };
    let opt_valid = |w: &Option<Word>| w.as_ref().is_none_or(|w| w.valid);
    let valid = task_id.valid
        && run_id.is_none_or(|r| (r as usize) < MAX_RUNS)
        && opt_valid(&worker_group)
        && opt_valid(&worker_id)
        && provisioner_id.valid
        && worker_type.valid;
    let run_word = run_id.map(|r| r.to_string());
    let task_words = [
        k.task_id,
        or_(run_word.as_deref()),
        or_(k.worker_group),
        or_(k.worker_id),
        k.provisioner_id,
        k.worker_type,
    ];

    // The primary task key.
    let key = task_routing_key(&k);
    assert!(key.starts_with("primary.") && key.ends_with("._"), "{key}");
    if valid && scheduler_id.valid && task_group_id.valid {
        let mut want = vec!["primary"];
        want.extend(task_words);
        want.extend([k.scheduler_id, k.task_group_id, "_"]);
        assert_eq!(words(&key), want);
        assert!(key.len() <= MAX_KEY, "{} bytes: {key}", key.len());
    }

    // The task group's key.
    let key = task_group_routing_key(k.task_group_id, k.scheduler_id);
    assert!(key.starts_with("primary.") && key.ends_with("._"), "{key}");
    if scheduler_id.valid && task_group_id.valid {
        assert_eq!(
            words(&key),
            ["primary", k.task_group_id, k.scheduler_id, "_"]
        );
        assert!(key.len() <= MAX_KEY);
    }

    // CC keys.
    let routes: Vec<String> = Vec::arbitrary(u)?;
    let ccs = route_ccs(&routes);
    assert_eq!(ccs.len(), routes.len());
    for (cc, r) in ccs.iter().zip(&routes) {
        assert_eq!(cc.strip_prefix("route."), Some(r.as_str()));
        assert!(!cc.starts_with("primary."));
    }

    // A task graph's key and the route it gives its tasks; the graph's routing is
    // `^[A-Za-z0-9._-]{0,10}$`, and may hold dots.
    let graph_id = Shape::Slugid.word(u)?;
    let routing = if bool::arbitrary(u)? {
        word_from(
            u,
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
            0,
            10,
        )?
    } else {
        String::arbitrary(u)?
    };
    let routing_valid = routing.len() <= 10
        && routing
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    let key = task_graph_routing_key(k.scheduler_id, &graph_id.text, &routing);
    let route = task_graph_route(k.scheduler_id, &graph_id.text, &routing);
    assert!(key.starts_with("primary."));
    if scheduler_id.valid && graph_id.valid && routing_valid {
        let w = words(&key);
        assert_eq!(
            w[..9],
            [
                "primary",
                "_",
                "_",
                "_",
                "_",
                "_",
                "_",
                k.scheduler_id,
                &graph_id.text
            ]
        );
        assert_eq!(w[9..].join("."), or_(Some(&routing)));
        assert!(key.len() <= MAX_KEY);
        assert_eq!(
            route,
            format!(
                "{}.{}.{}",
                k.scheduler_id,
                graph_id.text,
                or_(Some(&routing))
            )
        );
    }

    // The legacy key: the six task words, then the task's routing: its graph's route, or any
    // task route (1 to 249 characters) that starts with the scheduler's id.
    let legacy_routing: Option<String> = match u.int_in_range(0..=2u8)? {
        0 => None,
        1 => Some(route.clone()),
        _ => Some(format!("{}.{}", k.scheduler_id, String::arbitrary(u)?)),
    };
    let routing_ok = legacy_routing
        .as_ref()
        .is_none_or(|r| (1..=249).contains(&r.chars().count()));
    let key = legacy_routing_key(&k, legacy_routing.as_deref());
    assert!(key.len() <= MAX_KEY, "{} bytes: {key}", key.len());
    if valid && routing_ok {
        // The task words whole, then the routing, cut only if the key would be too long.
        let w = words(&key);
        assert_eq!(w[..6], task_words);
        let routing = or_(legacy_routing.as_deref());
        let rest = w[6..].join(".");
        assert!(routing.starts_with(&rest), "{rest:?} {routing:?}");
        if task_words.join(".").len() + 1 + routing.len() <= MAX_KEY {
            assert_eq!(rest, routing);
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
