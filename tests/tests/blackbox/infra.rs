//! The SAM template, `infra/template.yaml`, is generated here from the functions' catalog
//! (`functions::lambda::catalog`, which takes the API's functions from the endpoint
//! declarations) and `infra/resources.json` (the one declaration of tables, indexes, streams,
//! TTL, queues and buckets, which LocalStack and the DynamoDB test tables are created from
//! too). The tests prove that the committed template is exactly that output, that every
//! route reaches its own function through the gateway's routing (encoded or decoded
//! slashes), and that every function's handler is served by the binary.
//!
//! After changing an endpoint, a function or `resources.json`, regenerate with
//! `TCQ_BLESS=1 cargo test -p blackbox --test blackbox infra::`.

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use blackbox::shape::gateway::select;
use blackbox::shape::template::{http_routes, Route};
use functions::lambda::catalog::{
    specs, union, Spec, Trigger, ANONYMOUS_SCOPES, CLAIM_WORK_CONCURRENCY, COMMON_ENV,
    LEGACY_EXCHANGES,
};
use functions::lambda::Function;
use serde_json::{json, Map, Value};
use shared::api::declare::{Access, Functions, Need, Scopes};
use shared::api::router::{canonical_path, decode, find};
use shared::api::{Serves, SERVICES};
use shared::queue::PollSchedule;
use std::path::PathBuf;

const PREFIX: &str = "/api/queue/v1";
/// The parameter that chooses how the claim routes are served, and its conditions.
const CLAIM_MODE: &str = "ClaimMode";
const CLAIMS_ON_SERVICE: &str = "ClaimsOnService";
const CLAIMS_ON_FUNCTIONS: &str = "ClaimsOnFunctions";
const CLAIMS_SHORT: &str = "ClaimsShort";
/// claimWork's long poll, in milliseconds (`ClaimMode=lambda` and the service).
const LONG_POLL_MS: u64 = 20_000;
/// The port the claim service listens on in its container.
const SERVICE_PORT: u16 = 8080;
const AUTH_PREFIX: &str = "/api/auth/v1";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn resources() -> Value {
    serde_json::from_str(shared::store::dynamodb::RESOURCES_JSON).expect("resources.json")
}

/// `task-groups` -> `TaskGroups`, `claimWork` -> `ClaimWork`.
fn pascal(s: &str) -> String {
    s.split(['-', '_'])
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn table_id(name: &str) -> String {
    format!("{}Table", pascal(name))
}
fn bucket_id(name: &str) -> String {
    format!("{}Bucket", pascal(name.trim_start_matches("tcq-")))
}
fn queue_id(name: &str) -> String {
    format!("{}Queue", pascal(name))
}
fn function_id(handler: &str) -> String {
    format!("{}Function", pascal(handler))
}

fn sub(s: &str) -> Value {
    json!({ "Fn::Sub": s })
}
fn r(id: &str) -> Value {
    json!({ "Ref": id })
}
fn att(id: &str, a: &str) -> Value {
    json!({ "Fn::GetAtt": [id, a] })
}
fn if_(cond: &str, a: Value, b: Value) -> Value {
    json!({ "Fn::If": [cond, a, b] })
}
fn no_value() -> Value {
    r("AWS::NoValue")
}

/// The gateway route paths of one route: `<p>` -> `{p}`, a final splat -> `{p+}`. A splat
/// inside the path cannot be greedy on API Gateway, so `taskQueueId` there gets two keys: one
/// segment (`%2F` kept) and two (`%2F` decoded before routing); the function re-reads the
/// path itself either way.
fn gateway_paths(prefix: &str, pattern: &str) -> Vec<String> {
    let segs: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
    let mut paths = vec![prefix.to_string()];
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let alternatives: Vec<String> = match s.strip_prefix('<').and_then(|s| s.strip_suffix('>'))
        {
            Some(p) => match p.strip_prefix('*') {
                Some(p) if last => vec![format!("{{{p}+}}")],
                Some("taskQueueId") => vec![
                    "{taskQueueId}".to_string(),
                    "{provisionerId}/{workerType}".to_string(),
                ],
                Some(p) => panic!("no gateway mapping for a splat <*{p}> inside {pattern}"),
                None => vec![format!("{{{p}}}")],
            },
            None => vec![s.to_string()],
        };
        paths = paths
            .iter()
            .flat_map(|p| alternatives.iter().map(move |a| format!("{p}/{a}")))
            .collect();
    }
    paths
}

/// SAM policy templates on a table (with its indexes) or a bucket.
fn one(key: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert(key.to_string(), value);
    Value::Object(m)
}
fn table_policy(write: bool, table: &str) -> Value {
    let kind = if write {
        "DynamoDBCrudPolicy"
    } else {
        "DynamoDBReadPolicy"
    };
    one(kind, json!({ "TableName": r(&table_id(table)) }))
}
fn bucket_policy(write: bool, bucket: &str) -> Value {
    let kind = if write {
        "S3CrudPolicy"
    } else {
        "S3ReadPolicy"
    };
    one(kind, json!({ "BucketName": r(&bucket_id(bucket)) }))
}

/// Every API function reads the auth table to authenticate; beyond that, what its spec needs
/// (for the API's functions, what their endpoints declare), and the queue it records failures
/// in.
fn policies(spec: &Spec) -> Vec<Value> {
    let http = spec
        .triggers
        .iter()
        .any(|t| matches!(t, Trigger::Route { .. } | Trigger::Prefix(_)));
    let mut p = vec![];
    if http && !spec.needs.contains(&Need::Table("auth", Access::Write)) {
        p.push(table_policy(false, "auth"));
    }
    for n in &spec.needs {
        match n {
            Need::Table(t, a) => p.push(table_policy(*a == Access::Write, t)),
            Need::Buckets(a) => {
                for b in ["tcq-public-artifacts", "tcq-private-artifacts"] {
                    p.push(bucket_policy(*a == Access::Write, b));
                }
            }
        }
    }
    if let Some(q) = spec.failures_to {
        p.push(send_policy(q));
    }
    // What hands out presigned URLs signs them as the URL signer role.
    if http && spec.needs.iter().any(|n| matches!(n, Need::Buckets(_))) {
        p.push(json!({ "Statement": [{
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Resource": att(URL_SIGNER_ROLE, "Arn")
        }] }));
    }
    p
}

/// The role presigned URLs are signed as.
const URL_SIGNER_ROLE: &str = "UrlSignerRole";

/// The template value of a variable of the functions' configuration.
fn env_value(var: &str) -> Value {
    match var {
        "TCQ_TABLE_PREFIX" => sub("${AWS::StackName}-"),
        "TCQ_QUEUE_ACCESS_TOKEN_SECRET" => r("QueueAccessTokenSecret"),
        "TCQ_ROOT_ACCESS_TOKEN_SECRET" => r("RootAccessTokenSecret"),
        "TCQ_ARTIFACT_STORAGE" => json!("s3"),
        "TCQ_PUBLIC_ARTIFACT_BUCKET" => r(&bucket_id("tcq-public-artifacts")),
        "TCQ_PRIVATE_ARTIFACT_BUCKET" => r(&bucket_id("tcq-private-artifacts")),
        "TCQ_EXCHANGE_PREFIX" => r("ExchangePrefix"),
        "TCQ_SCHEDULER_ID" => r("SchedulerId"),
        "TCQ_SCHEDULER_EXCHANGE_PREFIX" => r("SchedulerExchangePrefix"),
        // Seconds as milliseconds without arithmetic: the parameter is a whole number.
        "TCQ_CLAIM_WORK_TIMEOUT_MS" => if_(
            CLAIMS_SHORT,
            sub("${ClaimWaitSeconds}000"),
            json!(LONG_POLL_MS.to_string()),
        ),
        // The publisher function runs on the tables' streams: no outbox index entry per
        // write (the publisher adds it where delivery failed).
        "TCQ_EVENTS_FROM_STREAM" => json!("true"),
        "TCQ_LOG_JSON" => json!("1"),
        "TCQ_METRICS_NAMESPACE" => metrics_namespace(),
        "TCQ_METRICS_PER_QUEUE" => r(METRICS_PER_QUEUE),
        "TCQ_AMQP_URL" => amqp_url(),
        "TCQ_AUTH_ROOT_URL" => r("AuthRootUrl"),
        "TCQ_PRIORITY_AGING_MS" => r("PriorityAgingMs"),
        "TCQ_URL_SIGNER_ROLE_ARN" => att(URL_SIGNER_ROLE, "Arn"),
        "TCQ_FEED_QUEUE_PREFIX" => sub("${AWS::StackName}-"),
        "TCQ_WORKER_MANAGER_EXCHANGE_PREFIX" => r("WorkerManagerExchangePrefix"),
        "TCQ_CLAIM_WORK_CONCURRENCY" => r(CLAIM_WORK_CONCURRENCY),
        "TCQ_ANONYMOUS_SCOPES" => r(ANONYMOUS_SCOPES),
        "TCQ_LEGACY_EXCHANGES" => r(LEGACY_EXCHANGES),
        // The re-read schedule the pickup bench measured (docs/architecture.md: claimWork across processes).
        "TCQ_CLAIM_WORK_POLL_MS" => json!(PollSchedule::default().first_ms.to_string()),
        "TCQ_CLAIM_WORK_POLL_MAX_MS" => json!(PollSchedule::default().max_ms.to_string()),
        other => panic!("no template value for {other}"),
    }
}

/// The template parameter of a stream function's retries of a failing batch.
fn stream_retries(handler: &str) -> String {
    format!("{}StreamRetries", pascal(handler))
}

/// The template parameter that deploys the gauges per task queue (`TCQ_METRICS_PER_QUEUE`).
const METRICS_PER_QUEUE: &str = "QueueMetricsPerQueue";

/// The CloudWatch namespace of the functions' EMF metrics (`TCQ_METRICS_NAMESPACE`).
fn metrics_namespace() -> Value {
    sub("tcq/${AWS::StackName}")
}

/// What an operator watches (issue 38): the metrics' parameters, the alarms that page on the
/// oldest pending run, expired claims and exceptions, and one dashboard.
fn operating(res: &mut Map<String, Value>, params: &mut Map<String, Value>) {
    use shared::jobs::declare::{OUTBOX_SWEEPER, PUBLISHER};
    use shared::metrics::{
        CLAIMED, COMPLETED, EXCEPTION, FAILED, HTTP_DURATION, HTTP_REQUESTS, OLDEST_PENDING,
        PENDING, PICKUP, STREAM_LAG, UNPUBLISHED_AGE, WORKERS,
    };
    use shared::records::task::ReasonResolved;
    params.insert(
        METRICS_PER_QUEUE.into(),
        json!({
            "Type": "String",
            "Default": "true",
            "AllowedValues": ["true", "false"],
            "Description": concat!(
                "Deploy pending, claimed, oldest pending age and workers per task queue as ",
                "CloudWatch metrics (4 per active task queue, billed by the hour); false: ",
                "totals only (README: Operating)"
            )
        }),
    );
    for (name, default, what) in [
        (
            "OldestPendingAgeThreshold",
            1800,
            "Alarm when a task queue's oldest pending run has waited this many seconds",
        ),
        (
            "ClaimExpiredThreshold",
            10,
            "Alarm when this many claims expire within 5 minutes",
        ),
        (
            "UnpublishedEventAgeThreshold",
            600,
            "Alarm when an event has waited this many seconds to be published (the broker is down or refuses it)",
        ),
        (
            "ExceptionThreshold",
            20,
            "Alarm when this many runs resolve exception (other than canceled or claim-expired) within 5 minutes",
        ),
    ] {
        params.insert(name.into(), parameter("Number", json!(default), what));
    }
    let ns = metrics_namespace();
    let actions = if_("HasAlarmTopic", json!([r("AlarmTopicArn")]), no_value());
    let one = |description: &str, metric: &str, dims: Value, statistic: &str, threshold: &str| {
        json!({
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmDescription": description,
                "Namespace": ns,
                "MetricName": metric,
                "Dimensions": dims,
                "Statistic": statistic,
                "Period": 300,
                "EvaluationPeriods": 1,
                "Threshold": r(threshold),
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": actions,
            }
        })
    };
    res.insert(
        "OldestPendingAgeAlarm".into(),
        one(
            "A task queue's oldest pending run has waited too long: no worker takes its tasks",
            OLDEST_PENDING.name,
            json!([]),
            "Maximum",
            "OldestPendingAgeThreshold",
        ),
    );
    // Both publishers: the stream's while it retries a batch, the sweeper's after.
    for (id, job) in [
        ("UnpublishedEventsAlarm", PUBLISHER.name),
        ("HeldEventsAlarm", OUTBOX_SWEEPER.name),
    ] {
        res.insert(
            id.into(),
            one(
                "Events wait to be published: the broker is unreachable or refuses them",
                UNPUBLISHED_AGE.name,
                json!([{ "Name": "job", "Value": job }]),
                "Maximum",
                "UnpublishedEventAgeThreshold",
            ),
        );
    }
    let reason = |r: ReasonResolved| json!([{ "Name": "reasonResolved", "Value": r.as_str() }]);
    res.insert(
        "ClaimExpiredAlarm".into(),
        one(
            "Claims expire: workers die or stop reclaiming",
            EXCEPTION.name,
            reason(ReasonResolved::ClaimExpired),
            "Sum",
            "ClaimExpiredThreshold",
        ),
    );
    let reasons = [
        ReasonResolved::DeadlineExceeded,
        ReasonResolved::WorkerShutdown,
        ReasonResolved::MalformedPayload,
        ReasonResolved::ResourceUnavailable,
        ReasonResolved::InternalError,
        ReasonResolved::IntermittentTask,
    ];
    let mut metrics: Vec<Value> = reasons
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "Id": format!("m{i}"),
                "ReturnData": false,
                "MetricStat": {
                    "Metric": { "Namespace": ns, "MetricName": EXCEPTION.name, "Dimensions": reason(*r) },
                    "Period": 300,
                    "Stat": "Sum"
                }
            })
        })
        .collect();
    let ids: Vec<String> = (0..reasons.len()).map(|i| format!("m{i}")).collect();
    metrics.push(json!({
        "Id": "exceptions",
        "Expression": format!("SUM([{}])", ids.join(", ")),
        "Label": "exceptions",
        "ReturnData": true
    }));
    res.insert(
        "ExceptionsAlarm".into(),
        json!({
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmDescription": "Runs resolve exception (deadlines, worker shutdowns, bad payloads, internal errors)",
                "EvaluationPeriods": 1,
                "Threshold": r("ExceptionThreshold"),
                "ComparisonOperator": "GreaterThanOrEqualToThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": actions,
                "Metrics": metrics,
            }
        }),
    );

    // The dashboard: task queues found by Metrics Insights (whatever their number), totals
    // from the dimensionless series.
    let insights = |metric: &str, by: &str, stat: &str| {
        json!([{
            "expression": format!(
                "SELECT {stat}({metric}) FROM SCHEMA(\"tcq/${{AWS::StackName}}\", {by}) GROUP BY {by} ORDER BY {stat}() DESC LIMIT 20"
            ),
            "id": format!("q{}", metric.len()),
            "period": 60
        }])
    };
    let total = |metric: &str, stat: &str| json!(["tcq/${AWS::StackName}", metric, { "stat": stat, "label": format!("{metric} {stat}") }]);
    let widget = |title: &str, metrics: Vec<Value>, x: u32, y: u32| {
        json!({
            "type": "metric", "x": x, "y": y, "width": 12, "height": 6,
            "properties": {
                "title": title, "region": "${AWS::Region}", "view": "timeSeries",
                "stacked": false, "period": 60, "metrics": metrics
            }
        })
    };
    let queue_dims = "provisionerId, workerType";
    let body = json!({ "widgets": [
        widget("Pending runs per task queue (top 20)", vec![insights(PENDING.name, queue_dims, "MAX")], 0, 0),
        widget("Oldest pending run per task queue, seconds (top 20)", vec![insights(OLDEST_PENDING.name, queue_dims, "MAX")], 12, 0),
        widget("Claims: claimed runs, workers, pickup (s)", vec![
            total(CLAIMED.name, "Maximum"),
            total(WORKERS.name, "Maximum"),
            total(PICKUP.name, "p50"),
            total(PICKUP.name, "p99"),
        ], 0, 6),
        widget("Resolutions by reason", vec![
            total(COMPLETED.name, "Sum"),
            total(FAILED.name, "Sum"),
            insights(EXCEPTION.name, "reasonResolved", "SUM"),
        ], 12, 6),
        widget("API calls by status; duration by service (s)", vec![
            insights(HTTP_REQUESTS.name, "status", "SUM"),
            json!(["tcq/${AWS::StackName}", HTTP_DURATION.name, "service", "queue", { "stat": "p99", "label": "queue p99" }]),
        ], 0, 12),
        widget("Publisher lag: events' age when confirmed (s); the stream's iterator age (ms)", vec![
            json!(["tcq/${AWS::StackName}", STREAM_LAG.name, "job", PUBLISHER.name, { "stat": "p99", "label": "event age p99" }]),
            json!(["AWS/Lambda", "IteratorAge", "FunctionName", format!("${{{}}}", function_id(PUBLISHER.name)), { "stat": "Maximum", "yAxis": "right" }]),
        ], 12, 12),
        widget("Function concurrency (account)", vec![
            json!(["AWS/Lambda", "ConcurrentExecutions", { "stat": "Maximum" }]),
        ], 0, 18),
    ]});
    res.insert(
        "OperatingDashboard".into(),
        json!({
            "Type": "AWS::CloudWatch::Dashboard",
            "Properties": {
                "DashboardName": sub("${AWS::StackName}-queue"),
                "DashboardBody": sub(&body.to_string()),
            }
        }),
    );
}

/// A job's durable RabbitMQ queue `<stack>-<queue>`: declared and bound by the publishers
/// (`TCQ_FEED_QUEUE_PREFIX`) before they publish anything.
fn feed_queue(queue: &str) -> Value {
    sub(&format!("${{AWS::StackName}}-{queue}"))
}

fn secret_policies() -> Vec<Value> {
    ["QueueAccessTokenSecret", "RootAccessTokenSecret"]
        .iter()
        .map(|s| json!({ "AWSSecretsManagerGetSecretValuePolicy": { "SecretArn": r(s) } }))
        .collect()
}

fn amqp_url() -> Value {
    if_(
        "CreateBroker",
        sub(concat!(
            "amqps://${BrokerUsername}:",
            "{{resolve:secretsmanager:${BrokerSecret}:SecretString:password}}",
            "@${Broker}.mq.${AWS::Region}.${AWS::URLSuffix}:5671"
        )),
        sub("{{resolve:secretsmanager:${AmqpUrlSecretArn}}}"),
    )
}

fn function(
    handler: &str,
    description: String,
    timeout: u32,
    memory: u32,
    policies: Vec<Value>,
    events: Map<String, Value>,
    env: Map<String, Value>,
) -> Value {
    let mut props = json!({
        "Description": description,
        "Handler": handler,
        "Timeout": timeout,
        "MemorySize": memory,
        "Policies": policies,
        "Events": events,
    });
    if !env.is_empty() {
        props["Environment"] = json!({ "Variables": env });
    }
    json!({ "Type": "AWS::Serverless::Function", "Properties": props })
}

fn alarm(description: String, metric: &str, namespace: &str, dims: Value, threshold: f64) -> Value {
    // A queue's depth and a stream's iterator age are levels, the functions' counts events.
    let statistic = if namespace == "AWS/SQS" || metric == "IteratorAge" {
        "Maximum"
    } else {
        "Sum"
    };
    json!({
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmDescription": description,
            "Namespace": namespace,
            "MetricName": metric,
            "Dimensions": dims,
            "Statistic": statistic,
            "Period": 300,
            "EvaluationPeriods": 1,
            "Threshold": threshold,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": if_("HasAlarmTopic", json!([r("AlarmTopicArn")]), no_value()),
        }
    })
}

/// A function's alarms, under the function's own condition (if it has one).
fn function_alarms(res: &mut Map<String, Value>, id: &str, condition: Option<&str>) {
    let dims = json!([{ "Name": "FunctionName", "Value": r(id) }]);
    for (name, metric, what) in [
        ("ErrorsAlarm", "Errors", "failed"),
        ("ThrottlesAlarm", "Throttles", "was throttled"),
    ] {
        let mut a = alarm(
            format!("{id} {what}"),
            metric,
            "AWS/Lambda",
            dims.clone(),
            1.0,
        );
        if let Some(c) = condition {
            a["Condition"] = json!(c);
        }
        res.insert(format!("{id}{name}"), a);
    }
}

fn table_resource(t: &Value) -> Value {
    let name = t["name"].as_str().expect("table name");
    let provisioned =
        json!({ "ReadCapacityUnits": r("ReadCapacity"), "WriteCapacityUnits": r("WriteCapacity") });
    let mut attrs = vec![t["pk"].clone(), t["sk"].clone()];
    let gsis: Vec<Value> = t["indexes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| {
            attrs.push(g["pk"].clone());
            attrs.push(g["sk"].clone());
            json!({
                "IndexName": g["name"],
                "KeySchema": [
                    { "AttributeName": g["pk"], "KeyType": "HASH" },
                    { "AttributeName": g["sk"], "KeyType": "RANGE" }
                ],
                "Projection": { "ProjectionType": projection(g) },
                "ProvisionedThroughput": if_("IsProvisioned", provisioned.clone(), no_value()),
            })
        })
        .collect();
    let mut props = json!({
        "TableName": sub(&format!("${{AWS::StackName}}-{name}")),
        "BillingMode": r("BillingMode"),
        "ProvisionedThroughput": if_("IsProvisioned", provisioned, no_value()),
        "AttributeDefinitions": attrs
            .iter()
            .map(|a| json!({ "AttributeName": a, "AttributeType": "S" }))
            .collect::<Vec<_>>(),
        "KeySchema": [
            { "AttributeName": t["pk"], "KeyType": "HASH" },
            { "AttributeName": t["sk"], "KeyType": "RANGE" }
        ],
        "PointInTimeRecoverySpecification": { "PointInTimeRecoveryEnabled": true },
        "SSESpecification": { "SSEEnabled": true },
    });
    if !gsis.is_empty() {
        props["GlobalSecondaryIndexes"] = json!(gsis);
    }
    if let Some(view) = t["stream"].as_str() {
        props["StreamSpecification"] = json!({ "StreamViewType": view });
    }
    if let Some(attr) = t["ttl"].as_str() {
        props["TimeToLiveSpecification"] = json!({ "AttributeName": attr, "Enabled": true });
    }
    json!({
        "Type": "AWS::DynamoDB::Table",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": props,
    })
}

fn bucket_resource(name: &str) -> Value {
    let public = name.contains("public");
    let mut props = json!({
        "BucketEncryption": { "ServerSideEncryptionConfiguration": [
            { "ServerSideEncryptionByDefault": { "SSEAlgorithm": "AES256" } }
        ] },
        "LifecycleConfiguration": { "Rules": [
            { "Id": "abort-incomplete-uploads", "Status": "Enabled",
              "AbortIncompleteMultipartUpload": { "DaysAfterInitiation": 1 } },
            { "Id": "safety-net-expiry", "Status": "Enabled",
              "ExpirationInDays": r("ArtifactMaxAgeDays") }
        ] },
        // Workers upload from browsers too (PUT to the presigned putUrl).
        "CorsConfiguration": { "CorsRules": [{
            "AllowedMethods": ["GET", "PUT", "HEAD"],
            "AllowedOrigins": [r("CorsAllowedOrigin")],
            "AllowedHeaders": ["*"],
            "ExposedHeaders": ["ETag"],
            "MaxAge": 3600
        }] },
        "OwnershipControls": { "Rules": [{ "ObjectOwnership": "BucketOwnerEnforced" }] },
    });
    // Public artifacts are served straight from their bucket, readable through its bucket
    // policy (never through ACLs); the private bucket blocks every kind of public access.
    props["PublicAccessBlockConfiguration"] = json!({
        "BlockPublicAcls": true,
        "IgnorePublicAcls": true,
        "BlockPublicPolicy": !public,
        "RestrictPublicBuckets": !public,
    });
    json!({
        "Type": "AWS::S3::Bucket",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": props,
    })
}

fn api_metric(id: &str, metric: &str) -> Value {
    json!({ "Id": id, "ReturnData": false, "MetricStat": { "Period": 300, "Stat": "Sum", "Metric": {
        "Namespace": "AWS/ApiGateway",
        "MetricName": metric,
        "Dimensions": [{ "Name": "ApiId", "Value": r("QueueApi") }]
    } } })
}

fn send_policy(queue: &str) -> Value {
    json!({ "SQSSendMessagePolicy": { "QueueName": att(&queue_id(queue), "QueueName") } })
}

fn parameter(kind: &str, default: Value, description: &str) -> Value {
    json!({ "Type": kind, "Default": default, "Description": description })
}

/// The whole template.
fn template() -> Value {
    let spec = resources();
    let mut params = Map::new();
    let mut res = Map::new();

    params.insert(
        "BillingMode".into(),
        json!({
            "Type": "String",
            "Default": "PAY_PER_REQUEST",
            "AllowedValues": ["PAY_PER_REQUEST", "PROVISIONED"],
            "Description": "DynamoDB capacity mode of every table and index (on-demand by default)"
        }),
    );
    params.insert(
        ANONYMOUS_SCOPES.into(),
        parameter(
            "String",
            json!(shared::auth::DEFAULT_ANONYMOUS_SCOPES.join(",")),
            concat!(
                "Scopes of unsigned requests (comma-separated) until a role named anonymous ",
                "is stored through the auth API; the default allows reading"
            ),
        ),
    );
    params.insert(
        LEGACY_EXCHANGES.into(),
        json!({
            "Type": "String",
            "Default": "false",
            "AllowedValues": ["false", "true"],
            "Description": "Also publish seed 003's exchanges (v1/queue:task-*, seven-word routing keys) next to today's (docs/events.md)"
        }),
    );
    params.insert(
        "AuthRootUrl".into(),
        parameter(
            "String",
            json!(""),
            concat!(
                "Root URL of an existing Taskcluster deployment whose auth service ",
                "authenticates every request (empty: this stack's own clients and roles; ",
                "README: Beside an existing deployment)"
            ),
        ),
    );
    params.insert(
        "PriorityAgingMs".into(),
        json!({
            "Type": "Number",
            "Default": shared::queue::PRIORITY_AGING_MS,
            "MinValue": 0,
            "Description": concat!(
                "Milliseconds a run waits pending before it is claimed ahead of every run that ",
                "waited less, whatever their priorities (0: never, upstream's strict order; ",
                "README: Priorities and aging)"
            )
        }),
    );
    params.insert(
        "WorkerManagerExchangePrefix".into(),
        parameter(
            "String",
            json!("exchange/taskcluster-worker-manager/v1/"),
            concat!(
                "Prefix of worker-manager's exchanges: its worker-stopped and worker-removed ",
                "messages resolve the runs of the workers they name (docs/deploying.md: ",
                "Beside an existing deployment)"
            ),
        ),
    );
    params.insert(
        CLAIM_WORK_CONCURRENCY.into(),
        parameter(
            "Number",
            json!(200),
            concat!(
                "Concurrency reserved for claimWork: each idle worker's long poll holds one ",
                "instance; four fifths may wait at once, and past that calls without work ",
                "answer at once (docs/deploying.md: Choosing a claim mode)"
            ),
        ),
    );
    params.insert(
        CLAIM_MODE.into(),
        json!({
            "Type": "String",
            "Default": "lambda",
            "AllowedValues": ["lambda", "lambda-short", "service"],
            "Description": concat!(
                "How the claim routes (claimWork, claimTask, reclaimTask) are served: lambda, ",
                "functions that long-poll 20 s; lambda-short, functions that wait at most ",
                "ClaimWaitSeconds; service, an always-on ECS service (docs/deploying.md: ",
                "Choosing a claim mode)"
            )
        }),
    );
    params.insert(
        "ClaimWaitSeconds".into(),
        json!({
            "Type": "Number",
            "Default": 0,
            "MinValue": 0,
            "MaxValue": 20,
            "Description": "With ClaimMode=lambda-short: longest a claimWork call waits for work (0: answers at once)"
        }),
    );
    params.insert(
        "ClaimServiceImage".into(),
        parameter(
            "String",
            json!(""),
            "With ClaimMode=service: the tc-queue image (scripts/build-image.sh), pushed to a registry the service can pull from",
        ),
    );
    for (name, default, what) in [
        (
            "ClaimServiceCpu",
            json!(256),
            "With ClaimMode=service: CPU units of each task (1024 a vCPU)",
        ),
        (
            "ClaimServiceMemory",
            json!(512),
            "With ClaimMode=service: memory of each task, in MiB",
        ),
        (
            "ClaimServiceMinTasks",
            json!(1),
            "With ClaimMode=service: tasks always running",
        ),
        (
            "ClaimServiceMaxTasks",
            json!(4),
            "With ClaimMode=service: most tasks scaling adds",
        ),
        (
            "ClaimServiceCpuTarget",
            json!(60),
            "With ClaimMode=service: average CPU percentage scaling keeps",
        ),
    ] {
        params.insert(name.into(), parameter("Number", default, what));
    }
    params.insert(
        "ClaimServiceVpcCidr".into(),
        parameter(
            "String",
            json!("10.72.0.0/16"),
            "With ClaimMode=service: address range of the VPC the stack creates for the service",
        ),
    );
    params.insert(
        "ReadCapacity".into(),
        parameter(
            "Number",
            json!(5),
            "Read capacity units of each table and index when PROVISIONED",
        ),
    );
    params.insert(
        "WriteCapacity".into(),
        parameter(
            "Number",
            json!(5),
            "Write capacity units of each table and index when PROVISIONED",
        ),
    );
    params.insert(
        "RabbitMqMode".into(),
        json!({
            "Type": "String",
            "Default": "create",
            "AllowedValues": ["create", "existing"],
            "Description": concat!(
                "create: an Amazon MQ RabbitMQ broker in this stack; existing: the broker whose ",
                "amqps:// URL is in the secret AmqpUrlSecretArn"
            )
        }),
    );
    params.insert(
        "AmqpUrlSecretArn".into(),
        parameter(
            "String",
            json!(""),
            "With RabbitMqMode=existing: ARN of a Secrets Manager secret holding the broker URL",
        ),
    );
    params.insert(
        "ExistingBrokerArn".into(),
        parameter(
            "String",
            json!(""),
            "With RabbitMqMode=existing: ARN of that Amazon MQ broker (the task-graph consumer's event source)",
        ),
    );
    params.insert(
        "ExistingBrokerCredentialsSecretArn".into(),
        parameter(
            "String",
            json!(""),
            concat!(
                "With RabbitMqMode=existing: ARN of a Secrets Manager secret holding ",
                "{\"username\", \"password\"} of a broker user the task-graph consumer reads as"
            ),
        ),
    );
    params.insert(
        "BrokerInstanceType".into(),
        parameter(
            "String",
            json!("mq.t3.micro"),
            "With RabbitMqMode=create: the broker's instance type",
        ),
    );
    params.insert(
        "BrokerUsername".into(),
        parameter(
            "String",
            json!("queue"),
            "With RabbitMqMode=create: the broker user the functions publish as",
        ),
    );
    params.insert(
        "ExchangePrefix".into(),
        parameter(
            "String",
            json!(shared::routing::DEFAULT_EXCHANGE_PREFIX),
            "Prefix of every exchange name",
        ),
    );
    params.insert(
        "SchedulerId".into(),
        parameter(
            "String",
            json!(shared::scheduler::DEFAULT_SCHEDULER_ID),
            "schedulerId of the task-graph scheduler's tasks",
        ),
    );
    params.insert(
        "SchedulerExchangePrefix".into(),
        parameter(
            "String",
            json!(shared::routing::SCHEDULER_EXCHANGE_PREFIX),
            "Prefix of the task-graph scheduler's exchange names",
        ),
    );
    params.insert(
        "ArtifactMaxAgeDays".into(),
        parameter(
            "Number",
            json!(400),
            "Age in days at which the buckets' lifecycle rule deletes objects (a safety net)",
        ),
    );
    params.insert(
        "CorsAllowedOrigin".into(),
        parameter(
            "String",
            json!("*"),
            "Origin allowed by the API's and the buckets' CORS rules",
        ),
    );
    params.insert(
        "AlarmTopicArn".into(),
        parameter(
            "String",
            json!(""),
            "SNS topic the alarms notify (none when empty)",
        ),
    );
    params.insert(
        "Api5xxRateThreshold".into(),
        parameter(
            "Number",
            json!(0.01),
            "Alarm when more than this fraction of API requests answer 5xx over 5 minutes",
        ),
    );
    params.insert(
        "LogRetentionDays".into(),
        parameter("Number", json!(30), "Retention of the functions' log group"),
    );
    for (handler, default_rate) in specs().iter().flat_map(|spec| {
        spec.triggers.iter().filter_map(move |t| match t {
            Trigger::Schedule(rate) => Some((spec.function.handler(), *rate)),
            _ => None,
        })
    }) {
        params.insert(
            format!("{}Rate", pascal(&handler)),
            parameter(
                "String",
                json!(default_rate),
                &format!("EventBridge schedule of the {handler} job"),
            ),
        );
    }
    // A stream function's retries of a failing batch, one parameter for its streams (the
    // first's default: they agree).
    for spec in specs() {
        let retries = spec.triggers.iter().find_map(|t| match t {
            Trigger::Stream { retries, .. } => Some(*retries),
            _ => None,
        });
        if let Some(retries) = retries {
            let handler = spec.function.handler();
            params.insert(
                stream_retries(&handler),
                json!({
                    "Type": "Number",
                    "Default": retries,
                    "MinValue": 0,
                    "MaxValue": 10000,
                    "Description": format!(
                        "Retries of a failing stream batch of the {handler} job before it is given up on (its work stays for the scheduled pass)"
                    )
                }),
            );
        }
    }

    // Data: every table, queue and bucket of resources.json, nothing else.
    for t in spec["tables"].as_array().expect("tables") {
        res.insert(
            table_id(t["name"].as_str().expect("name")),
            table_resource(t),
        );
    }
    for q in spec["queues"].as_array().expect("queues") {
        let name = q["name"].as_str().expect("queue name");
        let id = queue_id(name);
        res.insert(
            id.clone(),
            json!({
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "QueueName": sub(&format!("${{AWS::StackName}}-{name}")),
                    "MessageRetentionPeriod": 1_209_600,
                    "SqsManagedSseEnabled": true,
                }
            }),
        );
        res.insert(
            format!("{id}DepthAlarm"),
            alarm(
                format!("{name} holds failed work"),
                "ApproximateNumberOfMessagesVisible",
                "AWS/SQS",
                json!([{ "Name": "QueueName", "Value": att(&id, "QueueName") }]),
                1.0,
            ),
        );
    }
    for b in spec["buckets"].as_array().expect("buckets") {
        let name = b["name"].as_str().expect("bucket name");
        res.insert(bucket_id(name), bucket_resource(name));
    }
    let public = bucket_id("tcq-public-artifacts");
    res.insert(
        format!("{public}Policy"),
        json!({
            "Type": "AWS::S3::BucketPolicy",
            "Properties": {
                "Bucket": r(&public),
                "PolicyDocument": { "Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                    "Resource": sub(&format!("${{{public}.Arn}}/*"))
                }] }
            }
        }),
    );

    // Credentials, generated into Secrets Manager.
    for (id, client) in [
        ("QueueAccessTokenSecret", "static/taskcluster/queue"),
        ("RootAccessTokenSecret", "static/taskcluster/root"),
    ] {
        res.insert(
            id.into(),
            json!({
                "Type": "AWS::SecretsManager::Secret",
                "Properties": {
                    "Description": format!("accessToken of {client}"),
                    "GenerateSecretString": {
                        "SecretStringTemplate": json!({ "clientId": client }).to_string(),
                        "GenerateStringKey": "accessToken",
                        "PasswordLength": 44,
                        "ExcludePunctuation": true
                    }
                }
            }),
        );
    }

    // Presigned URLs are signed with sessions of a role of their own (an hour, renewed as
    // they run short), not with a function's credentials, which AWS may rotate before a URL
    // signed with them expires (shared::blobs::UrlSigner). The functions that hand out URLs
    // may assume it; it may only read and write the artifacts' objects.
    let objects: Vec<Value> = ["tcq-public-artifacts", "tcq-private-artifacts"]
        .iter()
        .map(|b| sub(&format!("${{{}.Arn}}/*", bucket_id(b))))
        .collect();
    res.insert(
        URL_SIGNER_ROLE.into(),
        json!({
            "Type": "AWS::IAM::Role",
            "Properties": {
                "Description": "Signs the artifacts' presigned URLs (assumed by the functions that hand them out)",
                "MaxSessionDuration": 3600,
                "AssumeRolePolicyDocument": { "Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow",
                    "Principal": { "AWS": sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root") },
                    "Action": "sts:AssumeRole"
                }] },
                "Policies": [{ "PolicyName": "objects", "PolicyDocument": { "Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow",
                    "Action": ["s3:GetObject", "s3:PutObject"],
                    "Resource": objects
                }] } }]
            }
        }),
    );

    // RabbitMQ: a broker of the stack's own, or an existing one.
    res.insert(
        "BrokerSecret".into(),
        json!({
            "Type": "AWS::SecretsManager::Secret",
            "Condition": "CreateBroker",
            "Properties": {
                "Description": "Password of the broker user the functions publish as",
                "GenerateSecretString": {
                    "SecretStringTemplate": sub("{\"username\": \"${BrokerUsername}\"}"),
                    "GenerateStringKey": "password",
                    "PasswordLength": 32,
                    "ExcludePunctuation": true
                }
            }
        }),
    );
    res.insert(
        "Broker".into(),
        json!({
            "Type": "AWS::AmazonMQ::Broker",
            "Condition": "CreateBroker",
            "Properties": {
                "BrokerName": sub("${AWS::StackName}-events"),
                "EngineType": "RABBITMQ",
                "EngineVersion": "3.13",
                "AutoMinorVersionUpgrade": true,
                "HostInstanceType": r("BrokerInstanceType"),
                "DeploymentMode": "SINGLE_INSTANCE",
                // Reached by functions outside any VPC, over amqps with the generated password.
                "PubliclyAccessible": true,
                "Users": [{
                    "Username": r("BrokerUsername"),
                    "Password":
                        sub("{{resolve:secretsmanager:${BrokerSecret}:SecretString:password}}")
                }],
                "Logs": { "General": true }
            }
        }),
    );

    // Observability: one log group for every function, JSON lines from tracing.
    res.insert(
        "FunctionLogGroup".into(),
        json!({
            "Type": "AWS::Logs::LogGroup",
            "Properties": {
                "LogGroupName": sub("/aws/lambda/${AWS::StackName}"),
                "RetentionInDays": r("LogRetentionDays")
            }
        }),
    );

    // The API.
    res.insert(
        "QueueApi".into(),
        json!({
            "Type": "AWS::Serverless::HttpApi",
            "Properties": {
                "Description": "Taskcluster Queue, Auth and Task-Graph Scheduler APIs",
                "CorsConfiguration": {
                    "AllowOrigins": [r("CorsAllowedOrigin")],
                    "AllowMethods": ["GET", "PUT", "POST", "DELETE"],
                    "AllowHeaders": ["authorization", "content-type"],
                    "MaxAge": 600
                },
                "AccessLogSettings": {
                    // The log group's Arn attribute ends in `:*`, which API Gateway rejects.
                    "DestinationArn": sub(concat!(
                        "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:",
                        "log-group:${FunctionLogGroup}"
                    )),
                    "Format": json!({
                        "requestId": "$context.requestId",
                        "routeKey": "$context.routeKey",
                        "status": "$context.status",
                        "latency": "$context.responseLatency",
                        "integrationError": "$context.integrationErrorMessage"
                    }).to_string()
                }
            }
        }),
    );
    operating(&mut res, &mut params);
    res.insert(
        "Api5xxRateAlarm".into(),
        json!({
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmDescription": "Share of API requests answered 5xx",
                "EvaluationPeriods": 1,
                "Threshold": r("Api5xxRateThreshold"),
                "ComparisonOperator": "GreaterThanThreshold",
                "TreatMissingData": "notBreaching",
                "AlarmActions": if_("HasAlarmTopic", json!([r("AlarmTopicArn")]), no_value()),
                "Metrics": [
                    api_metric("errors", "5xx"),
                    api_metric("requests", "Count"),
                    { "Id": "rate", "Expression": "IF(requests > 0, errors / requests, 0)",
                      "Label": "5xx rate", "ReturnData": true }
                ]
            }
        }),
    );

    // Every function of the catalog: the API's (one per endpoint, the auth service as one),
    // the publisher, the scheduled jobs and the task-graph scheduler's consumer.
    for spec in specs() {
        let handler = spec.function.handler();
        let id = function_id(&handler);
        let mut events = Map::new();
        let mut routes = 0;
        for trigger in &spec.triggers {
            match trigger {
                Trigger::Route {
                    verb,
                    path,
                    timeout_ms,
                } => {
                    for path in gateway_paths("", path) {
                        let mut props = json!({
                            "ApiId": r("QueueApi"),
                            "Method": verb.method().as_str(),
                            "Path": path,
                            "PayloadFormatVersion": "2.0"
                        });
                        if let Some(ms) = timeout_ms {
                            props["TimeoutInMillis"] = json!(ms);
                        }
                        let name = match routes {
                            0 => "Api".to_string(),
                            n => format!("Api{n}"),
                        };
                        routes += 1;
                        events.insert(name, json!({ "Type": "HttpApi", "Properties": props }));
                    }
                }
                Trigger::Prefix(prefix) => {
                    let name = match routes {
                        0 => "Api".to_string(),
                        n => format!("Api{n}"),
                    };
                    routes += 1;
                    events.insert(
                        name,
                        json!({ "Type": "HttpApi", "Properties": {
                            "ApiId": r("QueueApi"),
                            "Method": "ANY",
                            "Path": format!("{prefix}/{{proxy+}}"),
                            "PayloadFormatVersion": "2.0"
                        } }),
                    );
                }
                Trigger::Default => {
                    // No Path and no Method: SAM makes it the API's `$default` route, which
                    // takes every request that no other route matches.
                    events.insert(
                        "Default".into(),
                        json!({ "Type": "HttpApi", "Properties": {
                            "ApiId": r("QueueApi"),
                            "PayloadFormatVersion": "2.0"
                        } }),
                    );
                }
                Trigger::Schedule(_) => {
                    let rate = r(&format!("{}Rate", pascal(&handler)));
                    events.insert(
                        "Schedule".into(),
                        json!({ "Type": "Schedule", "Properties": { "Schedule": rate } }),
                    );
                }
                Trigger::Stream {
                    table,
                    marked_by,
                    parallel,
                    ..
                } => {
                    let failures = spec
                        .failures_to
                        .expect("a stream function records failures");
                    let mut props = json!({
                        "Stream": att(&table_id(table), "StreamArn"),
                        "StartingPosition": "TRIM_HORIZON",
                        "BatchSize": 100,
                        "MaximumBatchingWindowInSeconds": 1,
                        "FunctionResponseTypes": ["ReportBatchItemFailures"],
                        // A batch given up on is not lost: its events are held (or its marks
                        // in place) for the scheduled pass; its record lands in the failure
                        // queue.
                        "MaximumRetryAttempts": r(&stream_retries(&handler)),
                        "DestinationConfig": {
                            "OnFailure": { "Destination": att(&queue_id(failures), "Arn") }
                        }
                    });
                    if *parallel > 1 {
                        props["ParallelizationFactor"] = json!(parallel);
                    }
                    if let Some(index) = marked_by {
                        // Only the writes that resolve a task (the `deadline` entry, present
                        // while a task is unresolved, goes), and status items that carry the
                        // mark (its index key: written locally, or held by a batch that failed).
                        let resolving = json!({ "eventName": ["MODIFY"], "dynamodb": {
                            "OldImage": { "deadline_pk": { "S": [{ "exists": true }] } },
                            "NewImage": { "deadline_pk": { "S": [{ "exists": false }] } }
                        } });
                        let marked = json!({ "dynamodb": { "NewImage": {
                            format!("{index}_pk"): { "S": [{ "exists": true }] }
                        } } });
                        props["FilterCriteria"] = json!({ "Filters": [
                            { "Pattern": resolving.to_string() },
                            { "Pattern": marked.to_string() }
                        ] });
                    }
                    let name = if *table == "tasks" {
                        "Stream"
                    } else {
                        "GraphStream"
                    };
                    events.insert(
                        name.into(),
                        json!({ "Type": "DynamoDB", "Properties": props }),
                    );
                }
                Trigger::Broker { queue } => {
                    // An Amazon MQ event source mapping on the durable queue the publishers
                    // declare: it acknowledges a batch only once the function succeeded, and
                    // redelivers it otherwise (the consumer is idempotent).
                    events.insert(
                        "Feed".into(),
                        json!({ "Type": "MQ", "Properties": {
                            "Broker": if_("CreateBroker", att("Broker", "Arn"), r("ExistingBrokerArn")),
                            "Queues": [feed_queue(queue)],
                            "SourceAccessConfigurations": [{
                                "Type": "BASIC_AUTH",
                                "URI": if_("CreateBroker", r("BrokerSecret"), r("ExistingBrokerCredentialsSecretArn"))
                            }],
                            "BatchSize": 100,
                            "MaximumBatchingWindowInSeconds": 1
                        } }),
                    );
                }
            }
        }
        let env = spec
            .env
            .iter()
            .map(|v| (v.to_string(), env_value(v)))
            .collect();
        let mut f = function(
            &handler,
            spec.description.clone(),
            spec.timeout_secs,
            spec.memory_mb,
            [
                policies(&spec),
                if spec.function.reads_secrets() {
                    secret_policies()
                } else {
                    vec![]
                },
            ]
            .concat(),
            events,
            env,
        );
        if let Some(param) = spec.reserved_concurrency {
            f["Properties"]["ReservedConcurrentExecutions"] = r(param);
        }
        let condition = spec.claim_route.then_some(CLAIMS_ON_FUNCTIONS);
        if let Some(c) = condition {
            f["Condition"] = json!(c);
        }
        if spec
            .triggers
            .iter()
            .any(|t| matches!(t, Trigger::Schedule(_)))
        {
            // The next pass comes soon: no retries; a failed invocation is recorded.
            let failures = spec.failures_to.expect("a job records failures");
            f["Properties"]["EventInvokeConfig"] = json!({
                "MaximumRetryAttempts": 0,
                "DestinationConfig": {
                    "OnFailure": { "Type": "SQS", "Destination": att(&queue_id(failures), "Arn") }
                }
            });
        }
        res.insert(id.clone(), f);
        function_alarms(&mut res, &id, condition);
        if matches!(spec.function, Function::Job(j) if j.retries_every_stream_failure()) {
            // Where each write stores only its own events, those of a write live only in its
            // stream record until published (or held by a failing publisher): a publisher
            // that falls behind by an hour is paged long before the stream's 24-hour
            // retention runs out.
            res.insert(
                format!("{id}IteratorAgeAlarm"),
                alarm(
                    format!("{id} is over an hour behind its streams"),
                    "IteratorAge",
                    "AWS/Lambda",
                    json!([{ "Name": "FunctionName", "Value": r(&id) }]),
                    3_600_000.0,
                ),
            );
        }
    }

    claim_service(&mut res, &specs());

    let mut outputs = Map::new();
    outputs.insert(
        "RootUrl".into(),
        json!({ "Description": "rootUrl of the deployment (TASKCLUSTER_ROOT_URL)",
        "Value": sub("https://${QueueApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}") }),
    );
    for (id, client) in [("RootAccessToken", "root"), ("QueueAccessToken", "queue")] {
        outputs.insert(
            format!("{id}SecretArn"),
            json!({
                "Description": format!("Secret holding static/taskcluster/{client}'s accessToken"),
                "Value": r(&format!("{id}Secret"))
            }),
        );
    }
    outputs.insert(
        "TablePrefix".into(),
        json!({
            "Description": "TCQ_TABLE_PREFIX of the functions",
            "Value": sub("${AWS::StackName}-")
        }),
    );
    for t in spec["tables"].as_array().expect("tables") {
        let id = table_id(t["name"].as_str().expect("name"));
        outputs.insert(format!("{id}Name"), json!({ "Value": r(&id) }));
    }
    for b in spec["buckets"].as_array().expect("buckets") {
        let id = bucket_id(b["name"].as_str().expect("name"));
        outputs.insert(format!("{id}Name"), json!({ "Value": r(&id) }));
    }
    for q in spec["queues"].as_array().expect("queues") {
        let id = queue_id(q["name"].as_str().expect("name"));
        outputs.insert(format!("{id}Url"), json!({ "Value": r(&id) }));
    }
    outputs.insert(
        "BrokerId".into(),
        json!({ "Condition": "CreateBroker", "Value": r("Broker") }),
    );
    outputs.insert("LogGroup".into(), json!({ "Value": r("FunctionLogGroup") }));
    outputs.insert(
        "ClaimServiceLogGroupName".into(),
        json!({ "Condition": CLAIMS_ON_SERVICE, "Value": r("ClaimServiceLogGroup") }),
    );

    // Every function's configuration: these, and what its spec adds (`env_value`).
    let mut globals: Map<String, Value> = COMMON_ENV
        .iter()
        .map(|v| (v.to_string(), env_value(v)))
        .collect();
    globals.insert("RUST_LOG".into(), json!("info"));
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Transform": "AWS::Serverless-2016-10-31",
        "Description": "Taskcluster Queue on AWS Lambda (see docs/deploying.md)",
        "Parameters": params,
        "Conditions": {
            "IsProvisioned": { "Fn::Equals": [r("BillingMode"), "PROVISIONED"] },
            "CreateBroker": { "Fn::Equals": [r("RabbitMqMode"), "create"] },
            "HasAlarmTopic": { "Fn::Not": [{ "Fn::Equals": [r("AlarmTopicArn"), ""] }] },
            CLAIMS_ON_SERVICE: { "Fn::Equals": [r(CLAIM_MODE), "service"] },
            CLAIMS_ON_FUNCTIONS: { "Fn::Not": [{ "Condition": CLAIMS_ON_SERVICE }] },
            CLAIMS_SHORT: { "Fn::Equals": [r(CLAIM_MODE), "lambda-short"] }
        },
        "Rules": { "ClaimServiceNeedsItsImage": {
            "RuleCondition": { "Fn::Equals": [r(CLAIM_MODE), "service"] },
            "Assertions": [{
                "Assert": { "Fn::Not": [{ "Fn::Equals": [r("ClaimServiceImage"), ""] }] },
                "AssertDescription": "ClaimMode=service needs ClaimServiceImage (scripts/build-image.sh)"
            }]
        }, "ExistingBrokerNeedsItsUrl": {
            "RuleCondition": { "Fn::Equals": [r("RabbitMqMode"), "existing"] },
            "Assertions": [{
                "Assert": { "Fn::Not": [{ "Fn::Equals": [r("AmqpUrlSecretArn"), ""] }] },
                "AssertDescription": "RabbitMqMode=existing needs AmqpUrlSecretArn"
            }, {
                "Assert": { "Fn::Not": [{ "Fn::Equals": [r("ExistingBrokerArn"), ""] }] },
                "AssertDescription": "RabbitMqMode=existing needs ExistingBrokerArn"
            }, {
                "Assert": { "Fn::Not": [{ "Fn::Equals": [r("ExistingBrokerCredentialsSecretArn"), ""] }] },
                "AssertDescription": "RabbitMqMode=existing needs ExistingBrokerCredentialsSecretArn"
            }]
        } },
        "Globals": { "Function": {
            "Runtime": "provided.al2023",
            "Architectures": ["arm64"],
            // One binary for every function (functions/src/bin/lambda.rs), built once by
            // `sam build` through build/Makefile; the Handler says which function it is.
            "CodeUri": "build/",
            "LoggingConfig": { "LogFormat": "JSON", "LogGroup": r("FunctionLogGroup") },
            "Environment": { "Variables": globals },
        } },
        "Resources": res,
        "Outputs": outputs,
    })
}

/// Variables of the claim service's container beyond [`COMMON_ENV`]'s (less the secrets'
/// names: the tokens come as values, see [`claim_service`]): the long poll's pace, and the
/// server's own settings for serving beside the functions.
fn claim_service_env() -> Vec<(String, Value)> {
    // The secrets' names as the functions get them: the service reads the tokens itself, so
    // that a rotation reaches it as it reaches them, without a new task.
    let common = COMMON_ENV.iter().filter(|v| {
        // The server records no gauges (the functions' job does), and hands out no URLs.
        ![
            functions::env::METRICS_PER_QUEUE,
            functions::env::URL_SIGNER_ROLE_ARN,
        ]
        .contains(v)
    });
    let mut out: Vec<(String, Value)> = common
        .chain([
            &functions::env::CLAIM_WORK_POLL_MS,
            &functions::env::CLAIM_WORK_POLL_MAX_MS,
        ])
        .map(|v| match *v {
            // The service always long-polls (lambda-short is the functions' mode).
            functions::env::CLAIM_WORK_TIMEOUT_MS => {
                (v.to_string(), json!(LONG_POLL_MS.to_string()))
            }
            _ => (v.to_string(), env_value(v)),
        })
        .collect();
    for (k, v) in [
        (functions::env::BACKEND, json!("aws")),
        (functions::env::JOBS, json!("false")),
        (functions::env::BEHIND_GATEWAY, json!("true")),
        (functions::env::BIND, json!("0.0.0.0")),
        // Its counts go to CloudWatch as the functions' do, through its log group.
        (functions::env::METRICS_EMF_SECS, json!("60")),
        (functions::env::PORT, json!(SERVICE_PORT.to_string())),
        ("AWS_REGION", r("AWS::Region")),
        ("RUST_LOG", json!("info")),
    ] {
        out.push((k.to_string(), v));
    }
    out
}

/// Statements granting `needs` on the tables (the functions get SAM's policy templates; a
/// task role gets the same actions written out).
fn table_statements(needs: &[Need]) -> Vec<Value> {
    let read = [
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
    ];
    let write = [
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    ];
    needs
        .iter()
        .filter_map(|n| match n {
            Need::Table(t, a) => Some((t, a)),
            Need::Buckets(_) => None,
        })
        .map(|(t, a)| {
            let mut actions: Vec<&str> = read.to_vec();
            if *a == Access::Write {
                actions.extend(write);
            }
            let id = table_id(t);
            json!({
                "Effect": "Allow",
                "Action": actions,
                "Resource": [att(&id, "Arn"), sub(&format!("${{{id}.Arn}}/index/*"))]
            })
        })
        .collect()
}

/// `ClaimMode=service`: the claim routes served by `tc-queue` on ECS Fargate (arm64), in a
/// VPC of the stack's own with public subnets (no NAT gateway to pay for: each task has a
/// public address to reach the registry, the broker and Secrets Manager; DynamoDB through a
/// free gateway endpoint), reached from the HTTP API through a VPC link and Cloud Map (no
/// load balancer to pay for). Every resource is under the `ClaimsOnService` condition.
fn claim_service(res: &mut Map<String, Value>, specs: &[Spec]) {
    let claims: Vec<&Spec> = specs.iter().filter(|s| s.claim_route).collect();
    fn add<'a>(res: &'a mut Map<String, Value>, id: &str, ty: &str, props: Value) -> &'a mut Value {
        res.insert(
            id.to_string(),
            json!({ "Type": ty, "Condition": CLAIMS_ON_SERVICE, "Properties": props }),
        );
        res.get_mut(id).expect("inserted")
    }
    let tag = |what: &str| json!([{ "Key": "Name", "Value": sub(&format!("${{AWS::StackName}}-{what}")) }]);

    // The network.
    add(
        res,
        "ClaimServiceVpc",
        "AWS::EC2::VPC",
        json!({
            "CidrBlock": r("ClaimServiceVpcCidr"),
            "EnableDnsSupport": true,
            "EnableDnsHostnames": true,
            "Tags": tag("claims")
        }),
    );
    add(
        res,
        "ClaimServiceInternetGateway",
        "AWS::EC2::InternetGateway",
        json!({ "Tags": tag("claims") }),
    );
    add(
        res,
        "ClaimServiceGatewayAttachment",
        "AWS::EC2::VPCGatewayAttachment",
        json!({
            "VpcId": r("ClaimServiceVpc"),
            "InternetGatewayId": r("ClaimServiceInternetGateway")
        }),
    );
    add(
        res,
        "ClaimServiceRouteTable",
        "AWS::EC2::RouteTable",
        json!({
            "VpcId": r("ClaimServiceVpc"),
            "Tags": tag("claims")
        }),
    );
    add(
        res,
        "ClaimServiceDefaultRoute",
        "AWS::EC2::Route",
        json!({
            "RouteTableId": r("ClaimServiceRouteTable"),
            "DestinationCidrBlock": "0.0.0.0/0",
            "GatewayId": r("ClaimServiceInternetGateway")
        }),
    )["DependsOn"] = json!(["ClaimServiceGatewayAttachment"]);
    let mut subnets = vec![];
    for (i, name) in ["ClaimServiceSubnetA", "ClaimServiceSubnetB"]
        .iter()
        .enumerate()
    {
        add(
            res,
            name,
            "AWS::EC2::Subnet",
            json!({
                "VpcId": r("ClaimServiceVpc"),
                "AvailabilityZone": { "Fn::Select": [i, { "Fn::GetAZs": "" }] },
                "CidrBlock": { "Fn::Select": [i, { "Fn::Cidr": [r("ClaimServiceVpcCidr"), 2, 8] }] },
                "Tags": tag("claims")
            }),
        );
        add(
            res,
            &format!("{name}Routes"),
            "AWS::EC2::SubnetRouteTableAssociation",
            json!({
                "SubnetId": r(name),
                "RouteTableId": r("ClaimServiceRouteTable")
            }),
        );
        subnets.push(r(name));
    }
    add(
        res,
        "ClaimServiceDynamoDbEndpoint",
        "AWS::EC2::VPCEndpoint",
        json!({
            "VpcId": r("ClaimServiceVpc"),
            "VpcEndpointType": "Gateway",
            "ServiceName": sub("com.amazonaws.${AWS::Region}.dynamodb"),
            "RouteTableIds": [r("ClaimServiceRouteTable")]
        }),
    );
    add(
        res,
        "ClaimServiceLinkSecurityGroup",
        "AWS::EC2::SecurityGroup",
        json!({
            "GroupDescription": "The VPC link from the HTTP API to the claim service",
            "VpcId": r("ClaimServiceVpc")
        }),
    );
    add(
        res,
        "ClaimServiceSecurityGroup",
        "AWS::EC2::SecurityGroup",
        json!({
            "GroupDescription": "The claim service: its port, from the VPC link only",
            "VpcId": r("ClaimServiceVpc"),
            "SecurityGroupIngress": [{
                "IpProtocol": "tcp",
                "FromPort": SERVICE_PORT,
                "ToPort": SERVICE_PORT,
                "SourceSecurityGroupId": r("ClaimServiceLinkSecurityGroup")
            }]
        }),
    );

    // Discovery and the gateway's way in.
    add(
        res,
        "ClaimServiceNamespace",
        "AWS::ServiceDiscovery::PrivateDnsNamespace",
        json!({
            "Name": sub("${AWS::StackName}.claims.internal"),
            "Vpc": r("ClaimServiceVpc")
        }),
    );
    add(
        res,
        "ClaimServiceDiscovery",
        "AWS::ServiceDiscovery::Service",
        json!({
            "Name": "tc-queue",
            "NamespaceId": r("ClaimServiceNamespace"),
            // SRV records carry each task's port, which the gateway needs.
            "DnsConfig": { "DnsRecords": [{ "Type": "SRV", "TTL": 10 }], "RoutingPolicy": "MULTIVALUE" },
            "HealthCheckCustomConfig": { "FailureThreshold": 1 }
        }),
    );
    add(
        res,
        "ClaimServiceLink",
        "AWS::ApiGatewayV2::VpcLink",
        json!({
            "Name": sub("${AWS::StackName}-claims"),
            "SubnetIds": subnets.clone(),
            "SecurityGroupIds": [r("ClaimServiceLinkSecurityGroup")]
        }),
    );
    add(
        res,
        "ClaimServiceIntegration",
        "AWS::ApiGatewayV2::Integration",
        json!({
            "ApiId": r("QueueApi"),
            "IntegrationType": "HTTP_PROXY",
            "IntegrationMethod": "ANY",
            "ConnectionType": "VPC_LINK",
            "ConnectionId": r("ClaimServiceLink"),
            "IntegrationUri": att("ClaimServiceDiscovery", "Arn"),
            "PayloadFormatVersion": "1.0",
            "TimeoutInMillis": 30_000,
            // The host the client signed, set by the gateway over anything the client sent
            // (`Host` is the backend's once proxied), and the gateway's id for the request
            // (for the service's log lines; never the client's).
            "RequestParameters": {
                format!("overwrite:header.{}", shared::api::caller::GATEWAY_HOST_HEADER):
                    "$context.domainName",
                format!("overwrite:header.{}", shared::api::caller::GATEWAY_REQUEST_ID_HEADER):
                    "$context.requestId"
            }
        }),
    );
    for spec in &claims {
        let id = function_id(&spec.function.handler());
        let mut n = 0;
        for t in &spec.triggers {
            let Trigger::Route { verb, path, .. } = t else {
                continue;
            };
            for path in gateway_paths("", path) {
                add(
                    res,
                    &format!("{id}ServiceRoute{n}"),
                    "AWS::ApiGatewayV2::Route",
                    json!({
                        "ApiId": r("QueueApi"),
                        "RouteKey": format!("{} {path}", verb.method().as_str()),
                        "Target": sub("integrations/${ClaimServiceIntegration}")
                    }),
                );
                n += 1;
            }
        }
    }

    // The service.
    add(
        res,
        "ClaimServiceLogGroup",
        "AWS::Logs::LogGroup",
        json!({
            "LogGroupName": sub("/ecs/${AWS::StackName}-claims"),
            "RetentionInDays": r("LogRetentionDays")
        }),
    );
    let assume = json!({ "Version": "2012-10-17", "Statement": [{
        "Effect": "Allow",
        "Principal": { "Service": "ecs-tasks.amazonaws.com" },
        "Action": "sts:AssumeRole"
    }] });
    add(
        res,
        "ClaimServiceExecutionRole",
        "AWS::IAM::Role",
        json!({
            "AssumeRolePolicyDocument": assume,
            "ManagedPolicyArns": [sub("arn:${AWS::Partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy")]
        }),
    );
    // What the claim routes' functions need, and the auth table every API function reads.
    let needs = union(
        std::iter::once(Need::Table("auth", Access::Read))
            .chain(claims.iter().flat_map(|s| s.needs.iter().copied())),
    );
    add(
        res,
        "ClaimServiceTaskRole",
        "AWS::IAM::Role",
        json!({
            "AssumeRolePolicyDocument": assume,
            "Policies": [{ "PolicyName": "tables", "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": table_statements(&needs)
            } }, { "PolicyName": "tokens", "PolicyDocument": { "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": [r("QueueAccessTokenSecret"), r("RootAccessTokenSecret")]
            }] } }]
        }),
    );
    let environment: Vec<Value> = claim_service_env()
        .into_iter()
        .map(|(k, v)| json!({ "Name": k, "Value": v }))
        .collect();
    add(
        res,
        "ClaimServiceTaskDefinition",
        "AWS::ECS::TaskDefinition",
        json!({
            "Family": sub("${AWS::StackName}-claims"),
            "RequiresCompatibilities": ["FARGATE"],
            "NetworkMode": "awsvpc",
            "Cpu": r("ClaimServiceCpu"),
            "Memory": r("ClaimServiceMemory"),
            "RuntimePlatform": { "CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX" },
            "ExecutionRoleArn": att("ClaimServiceExecutionRole", "Arn"),
            "TaskRoleArn": att("ClaimServiceTaskRole", "Arn"),
            "ContainerDefinitions": [{
                "Name": "tc-queue",
                "Image": r("ClaimServiceImage"),
                "Essential": true,
                "PortMappings": [{ "ContainerPort": SERVICE_PORT, "Protocol": "tcp" }],
                "Environment": environment,
                // The image has no shell: the binary checks itself.
                "HealthCheck": {
                    "Command": ["CMD", "/tc-queue", "--health-check"],
                    "Interval": 10,
                    "Timeout": 5,
                    "Retries": 3,
                    "StartPeriod": 10
                },
                "StopTimeout": 30,
                "LogConfiguration": { "LogDriver": "awslogs", "Options": {
                    "awslogs-group": r("ClaimServiceLogGroup"),
                    "awslogs-region": r("AWS::Region"),
                    "awslogs-stream-prefix": "tc-queue"
                } }
            }]
        }),
    );
    // Container Insights would bill metrics per task: the service's own logs and the
    // gateway's metrics cover it.
    add(
        res,
        "ClaimServiceCluster",
        "AWS::ECS::Cluster",
        json!({
            "ClusterSettings": [{ "Name": "containerInsights", "Value": "disabled" }]
        }),
    );
    add(
        res,
        "ClaimService",
        "AWS::ECS::Service",
        json!({
            "Cluster": r("ClaimServiceCluster"),
            "LaunchType": "FARGATE",
            "DesiredCount": r("ClaimServiceMinTasks"),
            "TaskDefinition": r("ClaimServiceTaskDefinition"),
            "NetworkConfiguration": { "AwsvpcConfiguration": {
                "AssignPublicIp": "ENABLED",
                "Subnets": subnets,
                "SecurityGroups": [r("ClaimServiceSecurityGroup")]
            } },
            "ServiceRegistries": [{
                "RegistryArn": att("ClaimServiceDiscovery", "Arn"),
                "ContainerName": "tc-queue",
                "ContainerPort": SERVICE_PORT
            }],
            // A new task is healthy before an old one stops; a deploy that never gets healthy
            // is rolled back.
            "DeploymentConfiguration": {
                "MinimumHealthyPercent": 100,
                "MaximumPercent": 200,
                "DeploymentCircuitBreaker": { "Enable": true, "Rollback": true }
            }
        }),
    )["DependsOn"] = json!(["ClaimServiceDefaultRoute"]);
    add(
        res,
        "ClaimServiceScaling",
        "AWS::ApplicationAutoScaling::ScalableTarget",
        json!({
            "ServiceNamespace": "ecs",
            "ScalableDimension": "ecs:service:DesiredCount",
            "ResourceId": sub("service/${ClaimServiceCluster}/${ClaimService.Name}"),
            "MinCapacity": r("ClaimServiceMinTasks"),
            "MaxCapacity": r("ClaimServiceMaxTasks")
        }),
    );
    add(
        res,
        "ClaimServiceCpuScaling",
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        json!({
            "PolicyName": sub("${AWS::StackName}-claims-cpu"),
            "PolicyType": "TargetTrackingScaling",
            "ScalingTargetId": r("ClaimServiceScaling"),
            "TargetTrackingScalingPolicyConfiguration": {
                "PredefinedMetricSpecification": { "PredefinedMetricType": "ECSServiceAverageCPUUtilization" },
                "TargetValue": r("ClaimServiceCpuTarget"),
                "ScaleOutCooldown": 60,
                "ScaleInCooldown": 300
            }
        }),
    );
}

// ---- A minimal YAML writer: block style, JSON-quoted strings where a plain one could be
// misread. Deterministic, so the committed file can be compared byte for byte.

fn plain(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
        && !s.ends_with(':')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:".contains(c))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        )
}

fn inline(v: &Value) -> String {
    match v {
        Value::String(s) if plain(s) => s.clone(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        other => other.to_string(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

fn block(v: &Value, ind: usize, out: &mut String) {
    let pad = " ".repeat(ind);
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                let key = inline(&Value::String(k.clone()));
                if is_block(val) {
                    out.push_str(&format!("{pad}{key}:\n"));
                    block(val, ind + 2, out);
                } else {
                    out.push_str(&format!("{pad}{key}: {}\n", inline(val)));
                }
            }
        }
        Value::Array(a) => {
            for item in a {
                if is_block(item) {
                    let mut inner = String::new();
                    block(item, ind + 2, &mut inner);
                    out.push_str(&pad);
                    out.push_str("- ");
                    out.push_str(&inner[ind + 2..]);
                } else {
                    out.push_str(&format!("{pad}- {}\n", inline(item)));
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", inline(other))),
    }
}

fn to_yaml(v: &Value) -> String {
    let mut out = String::from(
        "# Generated from the route table, the Lambda handlers and infra/resources.json by\n\
         # tests/tests/blackbox/infra.rs; do not edit. Regenerate:\n\
         #   TCQ_BLESS=1 cargo test -p blackbox --test blackbox infra::\n",
    );
    block(v, 0, &mut out);
    out
}

#[test]
fn committed_template_is_the_generated_one() {
    let path = repo().join("infra/template.yaml");
    let want = to_yaml(&template());
    if std::env::var("TCQ_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &want).expect("write template");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "infra/template.yaml is stale: regenerate with TCQ_BLESS=1 cargo test -p blackbox --test blackbox infra::committed"
    );
}

/// The function the gateway sends `method path` to.
fn gateway_select<'a>(routes: &'a [Route], method: &str, path: &str) -> Option<&'a str> {
    select(routes, method, path).map(|(r, _)| r.function().unwrap_or_default())
}

/// A concrete path of `pattern`, each parameter from `value`, as a client sends it
/// (parameters percent-encoded) and as the gateway may hand it on (decoded).
fn sample_paths(
    prefix: &str,
    pattern: &str,
    value: impl Fn(&str) -> &'static str,
) -> (String, String) {
    // The clients' encoding: every byte but RFC 3986's unreserved ones.
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let (mut encoded, mut decoded) = (prefix.to_string(), prefix.to_string());
    for seg in pattern.trim_start_matches('/').split('/') {
        let v = match seg.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
            Some(p) => value(p.trim_start_matches('*')),
            None => {
                encoded.push('/');
                encoded.push_str(seg);
                decoded.push('/');
                decoded.push_str(seg);
                continue;
            }
        };
        encoded.push('/');
        encoded.push_str(&enc(v));
        decoded.push('/');
        decoded.push_str(v);
    }
    (encoded, decoded)
}

fn sample(param: &str) -> &'static str {
    match param {
        "taskId" | "taskGroupId" => "fN1SbArXTPSVFNUvaOlinQ",
        "taskGraphId" => "eN1SbArXTPSVFNUvaOlinQ",
        "runId" => "0",
        "taskQueueId" => "prov-1/worker-type",
        "name" => "public/logs/live log.txt",
        "clientId" => "project/ci/worker",
        "roleId" => "repo:github.com/org/*",
        "provisionerId" => "prov-1",
        "workerType" => "worker-type",
        "workerGroup" => "us-east-1",
        "workerId" => "i-0123",
        other => panic!("no sample for <{other}>"),
    }
}

#[test]
fn every_route_reaches_its_own_function_encoded_or_decoded() {
    let t = template();
    let keys = http_routes(&t);
    for service in SERVICES {
        for e in service.endpoints() {
            let want = function_id(&service.handler_name(e));
            let method = e.verb.method();
            let (encoded, decoded) = sample_paths(service.prefix, e.route, sample);
            for path in [&encoded, &decoded] {
                // The gateway sends it to the endpoint's function ...
                assert_eq!(
                    gateway_select(&keys, method.as_str(), path),
                    Some(want.as_str()),
                    "{method} {path}"
                );
                // ... which restores what the client signed and serves that endpoint.
                let canonical =
                    canonical_path(&method, path).unwrap_or_else(|| panic!("no route for {path}"));
                assert_eq!(canonical, encoded, "{path}");
                let m = find(&method, &canonical).expect("route");
                assert_eq!(m.endpoint.name, e.name, "{path}");
                for (k, v) in m.raw {
                    assert_eq!(decode(&v), sample(k), "{k} of {path}");
                }
            }
        }
    }
}

/// The committed template with the given parameters, as a stack has it.
fn stack_template(params: &[(&str, &str)]) -> blackbox::shape::template::Template {
    let params: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    blackbox::shape::template::Template::load(&repo().join("infra/template.yaml"), "t", &params)
        .expect("template")
}

/// `ClaimMode=service`: every path of the claim routes, encoded or decoded, reaches the claim
/// service and no claim function is deployed; every other endpoint keeps its function. In the
/// other modes the claim routes reach their functions and nothing of the service exists.
#[test]
fn the_claim_mode_decides_where_the_claim_routes_go() {
    use blackbox::shape::template::Target;
    for mode in ["lambda", "lambda-short", "service"] {
        let t = stack_template(&[(CLAIM_MODE, mode), ("ClaimServiceImage", "i")]);
        let routes = t.routes().expect("routes");
        let functions: Vec<String> = t
            .resources("AWS::Serverless::Function")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let services = t.resources("AWS::ECS::Service");
        assert_eq!(services.len(), usize::from(mode == "service"), "{mode}");
        for service in SERVICES {
            for e in service.endpoints() {
                let own = function_id(&service.handler_name(e));
                let (encoded, decoded) = sample_paths(service.prefix, e.route, sample);
                for path in [&encoded, &decoded] {
                    let (route, _) = select(&routes, e.verb.method().as_str(), path)
                        .unwrap_or_else(|| panic!("{mode}: no route for {path}"));
                    let want = if e.claim_route && mode == "service" {
                        Target::Service("ClaimService".into())
                    } else {
                        Target::Function(own.clone())
                    };
                    assert_eq!(route.target, want, "{mode}: {path}");
                }
                let deployed = functions.contains(&own);
                let claim_function = e.claim_route && mode == "service";
                assert_eq!(deployed, !claim_function, "{mode}: {own}");
            }
        }
    }
}

/// `lambda-short` gives the claim-work function `ClaimWaitSeconds` as its wait; the other
/// modes the 20 s long poll, and so does the claim service (which never waits short).
#[test]
fn lambda_short_waits_claim_wait_seconds() {
    let raw = template();
    let var = &raw["Globals"]["Function"]["Environment"]["Variables"]
        [functions::env::CLAIM_WORK_TIMEOUT_MS];
    for (mode, wait, want) in [
        ("lambda-short", "0", "0000"),
        ("lambda-short", "7", "7000"),
        ("lambda", "7", "20000"),
        ("service", "7", "20000"),
    ] {
        let t = stack_template(&[(CLAIM_MODE, mode), ("ClaimWaitSeconds", wait)]);
        let got = t.resolve(var).expect("resolves");
        assert_eq!(got, json!(want), "{mode} {wait}");
        assert_eq!(
            got.as_str().map(|s| s.parse::<u64>().ok()),
            Some(Some(want.parse().unwrap()))
        );
    }
    let env = claim_service_env();
    let timeout = env
        .iter()
        .find(|(k, _)| k == functions::env::CLAIM_WORK_TIMEOUT_MS);
    assert_eq!(timeout.map(|(_, v)| v.clone()), Some(json!("20000")));
}

/// Every variable the claim service's container gets (and each secret it is handed) is one
/// `tc-queue` reads, besides AWS's own.
#[test]
fn every_variable_the_claim_service_gets_is_one_tc_queue_reads() {
    use clap::CommandFactory;
    let read: Vec<String> = functions::ServerConfig::command()
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let raw = template();
    let container =
        &raw["Resources"]["ClaimServiceTaskDefinition"]["Properties"]["ContainerDefinitions"][0];
    let names = container["Environment"]
        .as_array()
        .into_iter()
        .chain(container["Secrets"].as_array())
        .flatten()
        .filter_map(|v| v["Name"].as_str());
    let mut n = 0;
    for name in names {
        n += 1;
        assert!(
            read.iter().any(|r| r == name) || ["AWS_REGION", "RUST_LOG"].contains(&name),
            "{name} is not read by tc-queue"
        );
    }
    assert!(n > 10, "{n} variables");
}

/// The published documents (schemas, references, every service's OpenAPI document) reach
/// the auth function, which serves them whatever its route; no endpoint's route takes them.
#[test]
fn published_documents_reach_the_auth_function() {
    let t = template();
    let keys = http_routes(&t);
    let auth = function_id("auth");
    let mut paths = vec![
        "/schemas/queue/v1/task-status-response.json".to_string(),
        "/references/manifest.json".to_string(),
        "/references/scheduler/v1/api.json".to_string(),
    ];
    paths.extend(SERVICES.iter().map(|s| shared::api::openapi::path(s)));
    for path in &paths {
        assert_eq!(
            gateway_select(&keys, "GET", path),
            Some(auth.as_str()),
            "GET {path}"
        );
        assert!(
            find(&axum::http::Method::GET, path).is_none(),
            "{path} is a route"
        );
        assert!(shared::api::references::is_document_path(path), "{path}");
    }
}

/// The web inspector's function takes the `$default` route: every page path, and whatever no
/// API route matches (an unknown API path, a method an API path lacks), which it answers with
/// the API's 404. The API's own prefixes stay with their functions.
#[test]
fn the_default_route_reaches_the_inspector() {
    let t = template();
    let keys = http_routes(&t);
    let ui = function_id(&Function::Ui.handler());
    let defaults: Vec<&Route> = keys.iter().filter(|r| r.is_default()).collect();
    assert_eq!(defaults.len(), 1, "one $default route");
    assert_eq!(defaults[0].function(), Some(ui.as_str()));
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/tasks/groups/fN1SbArXTPSVFNUvaOlinQ"),
        ("GET", "/tasks/fN1SbArXTPSVFNUvaOlinQ/runs/0"),
        ("GET", "/task-queues/prov-1/worker-type"),
        ("GET", "/task-graphs/eN1SbArXTPSVFNUvaOlinQ"),
        ("GET", "/assets/index-abc.js"),
        ("HEAD", "/favicon.svg"),
        ("GET", "/api/queue/v1/no-such-endpoint"),
        ("DELETE", "/api/queue/v1/task/fN1SbArXTPSVFNUvaOlinQ"),
    ] {
        assert_eq!(
            gateway_select(&keys, method, path),
            Some(ui.as_str()),
            "{method} {path}"
        );
    }
    let auth = function_id("auth");
    for path in [
        "/schemas/queue/v1/task.json",
        "/references/queue/v1/api.json",
    ] {
        assert_eq!(
            gateway_select(&keys, "GET", path),
            Some(auth.as_str()),
            "{path}"
        );
    }
    assert_eq!(
        gateway_select(&keys, "GET", "/api/queue/v1/ping"),
        Some(function_id("ping").as_str())
    );
}

#[test]
fn every_function_has_a_handler_in_the_binary() {
    let t = template();
    let mut handlers = Vec::new();
    for (id, r) in t["Resources"].as_object().expect("resources") {
        if r["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        let h = r["Properties"]["Handler"]
            .as_str()
            .unwrap_or_else(|| panic!("{id} has no Handler"));
        let function = Function::resolve(h)
            .unwrap_or_else(|| panic!("{id}: handler {h} is not served by the lambda binary"));
        let http = r["Properties"]["Events"]
            .as_object()
            .is_some_and(|e| e.values().any(|e| e["Type"] == "HttpApi"));
        // The API's functions, and the inspector on the `$default` route.
        let ui = matches!(function, Function::Ui);
        assert_eq!(http, function.serves().is_some() || ui, "{id}");
        handlers.push(h.to_string());
    }
    // ... and every function the binary serves is deployed.
    for f in Function::all() {
        let h = f.handler();
        assert!(
            handlers.contains(&h),
            "handler {h} has no function in the template"
        );
    }
}

/// Each job fed by the broker (the task-graph consumer, worker-manager's) reads, through an
/// Amazon MQ event source mapping with the broker user's credentials, exactly the durable
/// queue that every publishing function declares and binds; the publisher takes both tables'
/// streams.
#[test]
fn the_consumer_reads_the_queue_the_publishers_declare() {
    let t = template();
    let res = t["Resources"].as_object().expect("resources");
    let fed: Vec<_> = shared::jobs::JOBS
        .iter()
        .filter_map(|j| j.broker.as_ref().map(|f| (j.name, f.queue)))
        .collect();
    assert_eq!(fed.len(), 2, "{fed:?}");
    for (name, queue) in fed {
        let consumer = &res[&function_id(name)]["Properties"];
        let events = consumer["Events"].as_object().expect("events");
        assert_eq!(events.len(), 1);
        let mq = events.values().next().expect("one event");
        assert_eq!(mq["Type"], "MQ");
        let p = &mq["Properties"];
        assert_eq!(
            p["Broker"],
            if_("CreateBroker", att("Broker", "Arn"), r("ExistingBrokerArn"))
        );
        assert_eq!(p["Queues"], json!([feed_queue(queue)]));
        assert_eq!(p["SourceAccessConfigurations"][0]["Type"], "BASIC_AUTH");
        assert_eq!(
            p["SourceAccessConfigurations"][0]["URI"],
            if_(
                "CreateBroker",
                r("BrokerSecret"),
                r("ExistingBrokerCredentialsSecretArn")
            )
        );
    }
    // Every function that publishes declares those queues first (`<stack>-<queue>`), bound
    // with worker-manager's prefix as the stack says.
    for (id, f) in of_type(res, "AWS::Serverless::Function") {
        let env = &f["Properties"]["Environment"]["Variables"];
        if env.get("TCQ_AMQP_URL").is_some() {
            assert_eq!(
                env["TCQ_FEED_QUEUE_PREFIX"],
                sub("${AWS::StackName}-"),
                "{id}"
            );
            assert_eq!(
                env["TCQ_WORKER_MANAGER_EXCHANGE_PREFIX"],
                r("WorkerManagerExchangePrefix"),
                "{id}"
            );
        }
    }
    // The scheduler's id reaches every function (the consumer acts on that id's tasks, the
    // publishers bind the queue with it).
    assert_eq!(
        t["Globals"]["Function"]["Environment"]["Variables"]["TCQ_SCHEDULER_ID"],
        r("SchedulerId")
    );
    let publisher = &res[&function_id("publisher")]["Properties"]["Events"];
    let streams: Vec<&Value> = publisher
        .as_object()
        .expect("events")
        .values()
        .map(|e| &e["Properties"]["Stream"])
        .collect();
    assert!(streams.contains(&&att(&table_id("tasks"), "StreamArn")));
    assert!(streams.contains(&&att(&table_id("task-graphs"), "StreamArn")));
}

/// A table as both sides declare it: name, keys, indexes, stream, TTL.
/// An index's projection as declared in resources.json (ALL unless it says KEYS_ONLY).
fn projection(g: &Value) -> &str {
    g["projection"].as_str().unwrap_or("ALL")
}

fn normalize_spec_table(t: &Value) -> Value {
    let mut idx: Vec<Value> = t["indexes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| json!([g["name"], g["pk"], g["sk"], projection(g)]))
        .collect();
    idx.sort_by_key(|v| v.to_string());
    json!({
        "name": t["name"],
        "keys": [t["pk"], t["sk"]],
        "indexes": idx,
        "stream": t["stream"],
        "ttl": t["ttl"]
    })
}

fn normalize_template_table(p: &Value) -> Value {
    let name = p["TableName"]["Fn::Sub"]
        .as_str()
        .and_then(|s| s.strip_prefix("${AWS::StackName}-"))
        .expect("table name");
    let keys = |ks: &Value| json!([ks[0]["AttributeName"], ks[1]["AttributeName"]]);
    let mut idx: Vec<Value> = p["GlobalSecondaryIndexes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| {
            json!([
                g["IndexName"],
                keys(&g["KeySchema"])[0],
                keys(&g["KeySchema"])[1],
                g["Projection"]["ProjectionType"]
            ])
        })
        .collect();
    idx.sort_by_key(|v| v.to_string());
    let ttl = if p["TimeToLiveSpecification"]["Enabled"] == true {
        p["TimeToLiveSpecification"]["AttributeName"].clone()
    } else {
        Value::Null
    };
    json!({
        "name": name,
        "keys": keys(&p["KeySchema"]),
        "indexes": idx,
        "stream": p["StreamSpecification"]["StreamViewType"],
        "ttl": ttl
    })
}

fn of_type<'a>(
    res: &'a Map<String, Value>,
    ty: &'a str,
) -> impl Iterator<Item = (&'a String, &'a Value)> + 'a {
    res.iter().filter(move |(_, r)| r["Type"] == ty)
}

#[test]
fn template_data_resources_are_exactly_resources_json() {
    let spec = resources();
    let t = template();
    let res = t["Resources"].as_object().expect("resources");

    let mut want: Vec<Value> = spec["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .map(normalize_spec_table)
        .collect();
    let mut have: Vec<Value> = of_type(res, "AWS::DynamoDB::Table")
        .map(|(_, r)| normalize_template_table(&r["Properties"]))
        .collect();
    want.sort_by_key(|v| v.to_string());
    have.sort_by_key(|v| v.to_string());
    assert_eq!(have, want);
    for (id, item) in of_type(res, "AWS::DynamoDB::Table") {
        let p = &item["Properties"];
        assert_eq!(
            p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], true,
            "{id}"
        );
        assert_eq!(p["SSESpecification"]["SSEEnabled"], true, "{id}");
        assert_eq!(p["BillingMode"], r("BillingMode"), "{id}");
        // Every key attribute is declared, and nothing else (CloudFormation rejects both).
        let mut declared: Vec<&str> = p["AttributeDefinitions"]
            .as_array()
            .expect("attrs")
            .iter()
            .filter_map(|a| a["AttributeName"].as_str())
            .collect();
        declared.sort();
        declared.dedup();
        let mut used: Vec<&str> = p["KeySchema"]
            .as_array()
            .expect("keys")
            .iter()
            .chain(
                p["GlobalSecondaryIndexes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["KeySchema"].as_array().expect("gsi keys")),
            )
            .filter_map(|k| k["AttributeName"].as_str())
            .collect();
        used.sort();
        used.dedup();
        assert_eq!(declared, used, "{id}");
    }

    let names = |items: &Value| -> Vec<String> {
        let mut v: Vec<String> = items
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|i| i["name"].as_str().map(String::from))
            .collect();
        v.sort();
        v
    };
    let mut queues: Vec<String> = of_type(res, "AWS::SQS::Queue")
        .map(|(_, r)| {
            r["Properties"]["QueueName"]["Fn::Sub"]
                .as_str()
                .and_then(|s| s.strip_prefix("${AWS::StackName}-"))
                .expect("queue name")
                .to_string()
        })
        .collect();
    queues.sort();
    assert_eq!(queues, names(&spec["queues"]));
    let mut buckets: Vec<String> = of_type(res, "AWS::S3::Bucket")
        .map(|(id, _)| id.clone())
        .collect();
    buckets.sort();
    let mut want_buckets: Vec<String> = names(&spec["buckets"])
        .iter()
        .map(|b| bucket_id(b))
        .collect();
    want_buckets.sort();
    assert_eq!(buckets, want_buckets);
    // Every queue is a failure queue with a depth alarm.
    for q in names(&spec["queues"]) {
        assert!(
            res.contains_key(&format!("{}DepthAlarm", queue_id(&q))),
            "{q} has no alarm"
        );
    }
}

/// An HTTP API event as the gateway sends it for a request the client made to `encoded`:
/// signed over the encoded path, but with `rawPath` decoded.
fn decoded_gateway_event(method: &str, encoded: &str, route_key: &str) -> Value {
    let decoded = encoded.replace("%2F", "/");
    let mut event = blackbox::runtime_api::apigw_v2_event(method, encoded, None);
    event["rawPath"] = json!(decoded);
    event["routeKey"] = json!(route_key);
    event["requestContext"]["routeKey"] = json!(route_key);
    event["requestContext"]["http"]["path"] = json!(decoded);
    event
}

#[tokio::test]
async fn a_decoded_gateway_path_is_served_as_the_client_signed_it() {
    if blackbox::not_in_shape("drives the HTTP function's handler in this process") {
        return;
    }
    let app = blackbox::spawn_app().await;
    let tq = blackbox::task_queue_id();
    assert!(tq.contains('/'));
    app.queue()
        .createTask(&blackbox::slugid(), &blackbox::task_def(&tq))
        .await
        .expect("createTask");
    blackbox::settle_indexes().await;
    let encoded = format!("{PREFIX}/pending/{}", tq.replace('/', "%2F"));
    let event = decoded_gateway_event(
        "GET",
        &encoded,
        &format!("GET {PREFIX}/pending/{{taskQueueId+}}"),
    );
    let request = || v2_request(&event);
    assert_eq!(
        request().raw_path.as_deref(),
        Some(encoded.replace("%2F", "/").as_str())
    );

    let api = app.api();
    let pending = shared::api::endpoints::QUEUE
        .endpoint("pendingTasks")
        .expect("declared");
    let only = Serves::Endpoint(pending);
    let reply = functions::lambda::http::handle(&api, only, request()).await;
    let body = text_of(&reply);
    assert_eq!(reply.status_code, 200, "{body}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(body["taskQueueId"], tq.as_str());
    assert_eq!(body["pendingTasks"], 1);

    // Served as handed over, the decoded path would no longer match the client's MAC.
    let mut raw = shared::api::ApiRequest {
        method: axum::http::Method::GET,
        path: encoded.replace("%2F", "/"),
        query: None,
        headers: request().headers,
        body: Default::default(),
        also_signed: vec![],
        request_id: "infra-test".into(),
    };
    assert_eq!(api.handle(only, raw.clone()).await.status, 401);
    raw.path = encoded;
    assert_eq!(api.handle(only, raw).await.status, 200);

    // The auth function serves every service's OpenAPI document, whatever its route.
    let auth = Serves::Service(&shared::api::auth_service::AUTH);
    for service in SERVICES {
        let path = shared::api::openapi::path(service);
        let event = decoded_gateway_event("GET", &path, &format!("GET {path}"));
        let reply = functions::lambda::http::handle(&api, auth, v2_request(&event)).await;
        let body: Value = serde_json::from_str(&text_of(&reply)).expect("JSON");
        assert_eq!(reply.status_code, 200, "{path}: {body}");
        assert_eq!(
            body["paths"]["/ping"]["get"]["operationId"], "ping",
            "{path}"
        );
    }
}

/// A body the gateway base64-encodes (as it may: `isBase64Encoded`) reaches the endpoint
/// decoded; one that does not decode is refused as malformed input, not a crash.
#[tokio::test]
async fn base64_bodies_from_the_gateway_are_decoded() {
    use base64::Engine;
    if blackbox::not_in_shape("drives the HTTP function's handler in this process") {
        return;
    }
    let app = blackbox::spawn_app().await;
    let api = app.api();
    let auth = Serves::Service(&shared::api::auth_service::AUTH);
    let path = "/api/auth/v1/scopes/expand";
    let body = json!({ "scopes": ["queue:get-artifact:public/*"] }).to_string();
    let reply_to = |body: String, encoded: bool| {
        let mut event = blackbox::runtime_api::apigw_v2_event("POST", path, None);
        event["body"] = json!(body);
        event["isBase64Encoded"] = json!(encoded);
        v2_request(&event)
    };

    let encoded = base64::engine::general_purpose::STANDARD.encode(&body);
    let reply = functions::lambda::http::handle(&api, auth, reply_to(encoded, true)).await;
    let answer: Value = serde_json::from_str(&text_of(&reply)).expect("JSON");
    assert_eq!(reply.status_code, 200, "{answer}");
    assert_eq!(answer["scopes"], json!(["queue:get-artifact:public/*"]));
    assert!(!reply.is_base64_encoded);

    let reply =
        functions::lambda::http::handle(&api, auth, reply_to("{not base64".into(), true)).await;
    let answer: Value = serde_json::from_str(&text_of(&reply)).expect("JSON");
    assert_eq!(reply.status_code, 400, "{answer}");
    assert!(answer["code"].is_string(), "{answer}");
}

/// A gateway event as the Lambda runtime hands it to an HTTP function.
fn v2_request(event: &Value) -> ApiGatewayV2httpRequest {
    serde_json::from_value(event.clone()).expect("v2 event")
}

/// A reply's body as text.
fn text_of(reply: &ApiGatewayV2httpResponse) -> String {
    match &reply.body {
        Some(Body::Text(t)) => t.clone(),
        Some(other) => String::from_utf8_lossy(other.as_ref()).into_owned(),
        None => String::new(),
    }
}

/// The JSON body of a function's reply to `event`, which must be a 200.
async fn answer_200(api: &blackbox::runtime_api::RuntimeApi, event: Value, what: &str) -> Value {
    let reply = api
        .invoke(event, std::time::Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{what} not answered: {e:?}"));
    assert_eq!(reply["statusCode"], 200, "{what}: {reply}");
    serde_json::from_str(reply["body"].as_str().unwrap_or_default()).expect("JSON body")
}

/// The inspector's function, as the gateway's `$default` route hands it requests: the page for
/// client-side routes, assets with their types, and the API's 404 for an unknown API path.
#[tokio::test]
async fn the_inspector_function_answers_default_route_events() {
    let answer = |method: &str, path: &str| {
        let event = blackbox::runtime_api::apigw_v2_event(method, path, None);
        let reply = functions::lambda::http::handle_ui(v2_request(&event));
        let ct = reply
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = matches!(reply.body, Some(Body::Text(_)));
        // What the gateway is told must match what the body is.
        assert_eq!(reply.is_base64_encoded, !text, "{method} {path}");
        (
            reply.status_code as u16,
            ct,
            text,
            reply.body.as_ref().map(|b| b.to_vec()).unwrap_or_default(),
        )
    };
    let index = functions::ui::asset("index.html").expect("embedded");
    for path in [
        "/",
        "/tasks/groups/fN1SbArXTPSVFNUvaOlinQ",
        "/provisioners/p/worker-types/w",
    ] {
        assert_eq!(
            answer("GET", path),
            (200, "text/html; charset=utf-8".into(), true, index.to_vec()),
            "{path}"
        );
    }
    let html = String::from_utf8_lossy(index).into_owned();
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a script");
    let (status, ct, text, body) = answer("GET", script);
    assert_eq!(
        (status, ct.as_str(), text),
        (200, "text/javascript; charset=utf-8", true)
    );
    assert_eq!(
        body,
        functions::ui::asset(script.trim_start_matches('/')).expect("embedded")
    );
    let (status, _, _, body) = answer("GET", &format!("{PREFIX}/no-such-endpoint"));
    assert_eq!(status, 404);
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(body["code"], "ResourceNotFound");
}

/// The multi-call binary itself, as Lambda runs it (`_HANDLER` from the template), against
/// DynamoDB on LocalStack: a queue endpoint with a decoded gateway path, and the auth service.
#[tokio::test]
async fn the_lambda_binary_serves_what_its_handler_names() {
    if std::env::var("TCQ_LOCALSTACK").as_deref() != Ok("1") {
        eprintln!("TCQ_LOCALSTACK is not 1: run through scripts/test.sh, which starts LocalStack");
        return;
    }
    use blackbox::runtime_api::{localstack_tables, start_function, RuntimeApi};
    let prefix = localstack_tables("mc", false).await;
    let tq = blackbox::task_queue_id();

    let api = RuntimeApi::start().await;
    let (mut f, _) = start_function("lambda", &api, &prefix, &[("_HANDLER", "pendingTasks")]);
    let encoded = format!("{PREFIX}/pending/{}", tq.replace('/', "%2F"));
    let event = decoded_gateway_event(
        "GET",
        &encoded,
        &format!("GET {PREFIX}/pending/{{taskQueueId+}}"),
    );
    let body = answer_200(&api, event, "pendingTasks").await;
    assert_eq!(body["taskQueueId"], tq.as_str());
    f.kill().ok();

    let api = RuntimeApi::start().await;
    let (mut f, _) = start_function("lambda", &api, &prefix, &[("_HANDLER", "auth")]);
    let event = decoded_gateway_event(
        "GET",
        &format!("{AUTH_PREFIX}/clients/static%2Ftaskcluster%2Froot"),
        &format!("ANY {AUTH_PREFIX}/{{proxy+}}"),
    );
    let body = answer_200(&api, event, "client").await;
    assert_eq!(body["clientId"], "static/taskcluster/root");
    // The same function serves the other services' OpenAPI documents, on their own routes.
    let path = format!("{PREFIX}/openapi.json");
    let event = decoded_gateway_event("GET", &path, &format!("GET {path}"));
    let body = answer_200(&api, event, "openapi.json").await;
    assert_eq!(body["openapi"], "3.1.0");
    assert_eq!(body["info"]["title"], "The queue service");
    f.kill().ok();
}

/// The multi-call binary as the inspector's function: it serves without AWS (no store, no
/// secret is read at its start), through the Runtime API as Lambda runs it.
#[tokio::test]
async fn the_lambda_binary_serves_the_inspector_without_aws() {
    use blackbox::runtime_api::{built_binary, start_function, RuntimeApi};
    if !built_binary("lambda").exists() {
        eprintln!("the lambda binary is not built: scripts/test.sh builds the workspace first");
        return;
    }
    let api = RuntimeApi::start().await;
    let (mut f, _) = start_function("ui", &api, "unused-", &[("_HANDLER", "ui")]);
    let event = blackbox::runtime_api::apigw_v2_event("GET", "/tasks/groups/x", None);
    let reply = api
        .invoke(event, std::time::Duration::from_secs(30))
        .await
        .expect("ui answered");
    f.kill().ok();
    assert_eq!(reply["statusCode"], 200, "{reply}");
    let body = reply["body"].as_str().unwrap_or_default();
    assert_eq!(
        body.as_bytes(),
        functions::ui::asset("index.html").expect("embedded")
    );
}

#[test]
fn policies_grant_only_what_each_function_needs() {
    let t = template();
    for (id, f) in of_type(
        t["Resources"].as_object().expect("resources"),
        "AWS::Serverless::Function",
    ) {
        let handler = f["Properties"]["Handler"].as_str().unwrap_or_default();
        let function = Function::resolve(handler).expect("a function");
        let policies = f["Properties"]["Policies"].as_array().expect("policies");
        let grants = |kind: &str, target: &str| {
            policies.iter().any(|p| {
                p.get(kind)
                    .is_some_and(|v| v.to_string().contains(&format!("\"{target}\"")))
            })
        };
        // Only the auth service changes clients and roles.
        assert_eq!(
            grants("DynamoDBCrudPolicy", "AuthTable"),
            handler == "auth",
            "{id}"
        );
        if let Function::Endpoint(_, e) = function {
            // An endpoint that answers GET changes nothing (the scheduler's status and the
            // queue's listings included), and every endpoint can authenticate.
            let writes = policies
                .iter()
                .any(|p| p.get("DynamoDBCrudPolicy").is_some() || p.get("S3CrudPolicy").is_some());
            assert!(
                !(writes && e.verb == shared::api::declare::Verb::Get),
                "{id} may write but only reads"
            );
            assert!(
                grants("DynamoDBReadPolicy", "AuthTable"),
                "{id} cannot authenticate"
            );
        }
        // Buckets: artifact endpoints that hand out URLs, the object service's that touch
        // bytes (not `object`, metadata only, nor ping), the artifact reaper and the expiry
        // reaper (a task's artifacts go with it) only.
        let buckets = policies
            .iter()
            .any(|p| p.get("S3CrudPolicy").or(p.get("S3ReadPolicy")).is_some());
        use shared::jobs::declare::{
            ARTIFACT_REAPER, EXPIRY_REAPER, OUTBOX_SWEEPER, PUBLISHER, TASK_GRAPH_CONSUMER,
        };
        let job_is = |job| matches!(function, Function::Job(j) if j == job);
        let artifacts = job_is(&ARTIFACT_REAPER)
            || job_is(&EXPIRY_REAPER)
            || matches!(function, Function::Endpoint(_, e) if e.route.contains("/artifacts/")
                || e.route.contains("/artifact-content/"))
            || matches!(function, Function::Endpoint(s, e)
                if std::ptr::eq(s, &shared::api::object_service::OBJECT)
                && e.route.contains("load/<"));
        assert_eq!(buckets, artifacts, "{id}");
        // The task graphs: the scheduler's functions and the publishers of their events.
        let graphs = policies
            .iter()
            .any(|p| p.to_string().contains("\"TaskGraphsTable\""));
        let scheduler = matches!(function, Function::Endpoint(s, e)
                if std::ptr::eq(s, &shared::api::scheduler::SCHEDULER)
                && e.route.contains('<'))
            || job_is(&TASK_GRAPH_CONSUMER)
            || job_is(&PUBLISHER)
            || job_is(&OUTBOX_SWEEPER);
        assert_eq!(graphs, scheduler, "{id}");
        // Every function reads the queue's token, but the inspector's, which holds nothing
        // (no secret, no table, no bucket); nothing else in Secrets Manager but the root's.
        if matches!(function, Function::Ui) {
            assert!(policies.is_empty(), "{id} needs no rights: {policies:?}");
        }
        assert_eq!(
            grants(
                "AWSSecretsManagerGetSecretValuePolicy",
                "QueueAccessTokenSecret"
            ),
            function.reads_secrets(),
            "{id}"
        );
        // Those that hand out URLs may assume the URL signer role, and nothing else may.
        let signer = json!({ "Statement": [{
            "Effect": "Allow",
            "Action": "sts:AssumeRole",
            "Resource": att(URL_SIGNER_ROLE, "Arn")
        }] });
        let signs = policies.contains(&signer);
        let reaper = job_is(&ARTIFACT_REAPER) || job_is(&EXPIRY_REAPER);
        assert_eq!(signs, artifacts && !reaper, "{id}");
        for p in policies.iter().filter(|p| **p != signer) {
            let kind = p
                .as_object()
                .and_then(|m| m.keys().next())
                .expect("one policy template");
            assert!(
                [
                    "DynamoDBReadPolicy",
                    "DynamoDBCrudPolicy",
                    "S3ReadPolicy",
                    "S3CrudPolicy",
                    "SQSSendMessagePolicy",
                    "AWSSecretsManagerGetSecretValuePolicy"
                ]
                .contains(&kind.as_str()),
                "{id}: {kind} is not a scoped policy template"
            );
        }
    }
}

/// Every endpoint's scopes are declared: a template (rendered in the reference format), or,
/// for the scheduler's writes, a description of the expression the handler builds.
#[test]
fn every_endpoint_declares_its_scopes() {
    for service in SERVICES {
        for e in service.endpoints() {
            match e.scopes {
                Scopes::None => {}
                Scopes::Template(t) => assert!(!t.to_json().is_null(), "{}", e.name),
                Scopes::Dynamic(what) => assert!(!what.is_empty(), "{}", e.name),
            }
            assert!(!e.title.is_empty(), "{} has no title", e.name);
            if let Functions::PerEndpoint { .. } = service.functions {
                assert!(
                    Function::resolve(&service.handler_name(e)).is_some(),
                    "{} has no function",
                    e.name
                );
            }
        }
    }
}

/// `v` with every number a float: the template writes `1.0` where CDK's JSON writes `1`.
fn numbers_as_floats(v: Value) -> Value {
    match v {
        Value::Number(n) => n.as_f64().map(Value::from).unwrap_or(Value::Number(n)),
        Value::Array(a) => Value::Array(a.into_iter().map(numbers_as_floats).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (k, numbers_as_floats(v)))
                .collect(),
        ),
        v => v,
    }
}

/// The CDK app (`infra/cdk/app.js`), synthesised as `cdk synth` would, declares the
/// template's parameters, conditions, rules, outputs, resources and globals, each as the
/// template has it, but for every function's code, which is the one CDK asset; besides,
/// only CDK's own bootstrap check (and its metadata resource, where it adds one). Needs `TCQ_CDK_APP`, the app's directory with its npm packages installed
/// (the test command's tools do it).
#[test]
fn the_cdk_app_declares_what_the_template_does() {
    let Ok(app) = std::env::var("TCQ_CDK_APP") else {
        eprintln!("TCQ_CDK_APP is not set (scripts/test-tools.sh sets it): CDK not checked");
        return;
    };
    let (out, code) = (
        tempfile::tempdir().expect("out"),
        tempfile::tempdir().expect("code"),
    );
    std::fs::write(code.path().join("bootstrap"), b"stand-in").expect("bootstrap");
    let run = std::process::Command::new("node")
        .arg("app.js")
        .current_dir(&app)
        .env("CDK_OUTDIR", out.path())
        .env("TCQ_LAMBDA_DIR", code.path())
        .env("TCQ_STACK", "tcq")
        .output()
        .expect("node");
    assert!(
        run.status.success(),
        "synth failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let synth: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("tcq.template.json")).expect("synthesised template"),
    )
    .expect("json");
    let want = template();
    let functions = 1 + SERVICES.len(); // at least: the inspector and a function per service
    let mut with_asset = 0;
    for section in ["Parameters", "Conditions", "Rules", "Outputs", "Resources"] {
        let (have, want) = (&synth[section], &want[section]);
        for (id, w) in want.as_object().expect(section) {
            let mut h = have[id].clone();
            let mut w = w.clone();
            if w["Type"] == "AWS::Serverless::Function" {
                let uri = h["Properties"]
                    .as_object_mut()
                    .and_then(|p| p.remove("CodeUri"))
                    .unwrap_or_default();
                assert!(
                    uri["Bucket"].is_object() && uri["Key"].is_string(),
                    "{id}'s code is not the asset: {uri}"
                );
                w["Properties"].as_object_mut().map(|p| p.remove("CodeUri"));
                with_asset += 1;
            }
            assert_eq!(
                numbers_as_floats(h),
                numbers_as_floats(w),
                "{section}.{id} differs in the CDK app"
            );
        }
        let extra: Vec<&String> = have
            .as_object()
            .expect(section)
            .keys()
            .filter(|k| want.get(k.as_str()).is_none())
            .collect();
        let cdk_own: &[&str] = match section {
            "Parameters" => &["BootstrapVersion"],
            "Rules" => &["CheckBootstrapVersion"],
            "Resources" | "Conditions" => &["CDKMetadata", "CDKMetadataAvailable"],
            _ => &[],
        };
        assert!(
            extra.iter().all(|k| cdk_own.contains(&k.as_str())),
            "{section}: the CDK app declares {extra:?} besides the template"
        );
    }
    assert!(with_asset > functions, "{with_asset} functions");
    assert_eq!(synth["Transform"], want["Transform"]);
    assert_eq!(synth["Globals"], want["Globals"]);
}

/// Every alarm and dashboard series on the functions' namespace reads a metric they print,
/// with dimensions it is deployed with (`shared::metrics`); the gauges' job runs on a
/// schedule and reads only.
#[test]
fn the_alarms_and_the_dashboard_read_what_the_functions_print() {
    use shared::metrics::METRICS;
    let t = template();
    let res = t["Resources"].as_object().expect("resources");
    let declared = |name: &str, dims: &[&str]| {
        METRICS.iter().any(|m| {
            m.name == name
                && m.dimensions.iter().any(|set| {
                    let mut a: Vec<&str> = set.to_vec();
                    let mut b = dims.to_vec();
                    a.sort();
                    b.sort();
                    a == b
                })
        })
    };
    let ns = metrics_namespace();
    let mut alarms = 0;
    for (id, a) in of_type(res, "AWS::CloudWatch::Alarm") {
        let p = &a["Properties"];
        let mut stats: Vec<Value> = vec![p.clone()];
        if let Some(ms) = p["Metrics"].as_array() {
            stats.extend(ms.iter().map(|m| m["MetricStat"]["Metric"].clone()));
        }
        for s in stats.iter().filter(|s| s["Namespace"] == ns) {
            let name = s["MetricName"].as_str().expect("metric name");
            let dims: Vec<&str> = s["Dimensions"]
                .as_array()
                .map(|d| d.iter().filter_map(|d| d["Name"].as_str()).collect())
                .unwrap_or_default();
            assert!(
                declared(name, &dims),
                "{id}: {name} by {dims:?} is not printed"
            );
            alarms += 1;
        }
    }
    assert!(
        alarms >= 8,
        "{alarms} alarm series on the functions' metrics"
    );
    for id in [
        "OldestPendingAgeAlarm",
        "ClaimExpiredAlarm",
        "ExceptionsAlarm",
    ] {
        assert!(res.contains_key(id), "{id}");
    }

    let dash = &res["OperatingDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"];
    let body: Value = serde_json::from_str(dash.as_str().expect("a body")).expect("JSON");
    let mut series = 0;
    for w in body["widgets"].as_array().expect("widgets") {
        for m in w["properties"]["metrics"].as_array().expect("metrics") {
            if let Some(q) = m[0]["expression"].as_str() {
                // SELECT STAT(metric) FROM SCHEMA("ns", dims...) GROUP BY ...
                let name = q
                    .split_once('(')
                    .and_then(|(_, r)| r.split_once(')'))
                    .map(|(n, _)| n)
                    .expect("a metric");
                let dims: Vec<&str> = q
                    .split_once("SCHEMA(")
                    .and_then(|(_, r)| r.split_once(')'))
                    .map(|(s, _)| s.split(", ").skip(1).collect())
                    .expect("a schema");
                assert!(q.contains("\"tcq/${AWS::StackName}\""), "{q}");
                assert!(
                    declared(name, &dims),
                    "{q}: {name} by {dims:?} is not printed"
                );
                series += 1;
            } else if m[0] == "tcq/${AWS::StackName}" {
                let parts = m.as_array().expect("a series");
                let name = parts[1].as_str().expect("metric");
                let dims: Vec<&str> = parts[2..]
                    .iter()
                    .filter_map(Value::as_str)
                    .step_by(2)
                    .collect();
                assert!(declared(name, &dims), "{name} by {dims:?} is not printed");
                series += 1;
            }
        }
    }
    assert!(
        series >= 10,
        "{series} dashboard series on the functions' metrics"
    );

    let job = &res[&function_id("queueMetrics")]["Properties"];
    assert!(
        job["Events"]
            .as_object()
            .is_some_and(|e| e.values().any(|e| e["Type"] == "Schedule")),
        "{job}"
    );
    let variables = &t["Globals"]["Function"]["Environment"]["Variables"];
    assert_eq!(variables[functions::env::METRICS_NAMESPACE], ns);
    assert_eq!(
        variables[functions::env::METRICS_PER_QUEUE],
        r(METRICS_PER_QUEUE)
    );
}
