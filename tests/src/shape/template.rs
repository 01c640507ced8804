//! The generated SAM template, read as the deployed shape needs it: its parameters (defaults,
//! with overrides), intrinsic functions resolved against the stack's names, and its functions
//! with their events, variables and limits.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The account and region LocalStack answers for.
pub const ACCOUNT: &str = "000000000000";
/// The region.
pub const REGION: &str = "us-east-1";

/// A failure to read or resolve the template.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The template with the stack's names and parameters.
pub struct Template {
    raw: Value,
    /// The stack's name (every table, queue and secret is named after it).
    pub stack: String,
    params: BTreeMap<String, String>,
    /// Physical ids and attributes of the resources created so far: `id` → `Ref`, and
    /// `id.Attr` → `Fn::GetAtt`.
    physical: BTreeMap<String, String>,
}

/// An HTTP API route.
#[derive(Debug, Clone)]
pub struct Route {
    /// `GET`, ..., or `ANY`.
    pub method: String,
    /// The path with `{param}` and a final `{param+}`.
    pub path: String,
    /// The integration's timeout.
    pub timeout: Duration,
    /// Where it goes.
    pub target: Target,
    /// Headers its integration overwrites (`overwrite:header.<name>`), with the value's
    /// expression (only `$context.domainName` is emulated).
    pub set_headers: Vec<(String, String)>,
}

/// What a route's integration reaches.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A function (its logical id): a payload format 2.0 event.
    Function(String),
    /// An ECS service (its logical id), through a VPC link and its Cloud Map registry: an
    /// HTTP proxy.
    Service(String),
}

/// An ECS service of the template: its container, as the deployed shape runs it.
#[derive(Debug, Clone)]
pub struct Service {
    /// Its logical id.
    pub id: String,
    /// The container's variables, resolved.
    pub env: BTreeMap<String, String>,
    /// Variables from secrets: name and `ValueFrom` (`<secret ARN>[:<JSON key>::]`).
    pub secrets: Vec<(String, String)>,
    /// Tasks it runs (its desired count).
    pub tasks: usize,
}

impl Route {
    /// The function it goes to, if it goes to one.
    pub fn function(&self) -> Option<&str> {
        match &self.target {
            Target::Function(f) => Some(f),
            Target::Service(_) => None,
        }
    }

    /// The `$default` route: an event without a path (SAM's way to declare it).
    pub fn is_default(&self) -> bool {
        self.path.is_empty()
    }

    /// Its route key, as the gateway's events and access log name it.
    pub fn key(&self) -> String {
        if self.is_default() {
            "$default".into()
        } else {
            format!("{} {}", self.method, self.path)
        }
    }
}

/// A DynamoDB stream event source mapping.
#[derive(Debug, Clone)]
pub struct StreamMapping {
    /// The stream's ARN.
    pub stream_arn: String,
    /// Records per invocation.
    pub batch_size: usize,
    /// How long to gather a batch.
    pub window: Duration,
    /// Filter patterns (any one must match); none: every record.
    pub filters: Vec<Value>,
    /// Retries of a failing batch before it goes to the failure destination (`None`: until
    /// the records expire).
    pub retries: Option<u32>,
    /// Split a failing batch in two and retry each half.
    pub bisect: bool,
    /// The function reports partial batch failures.
    pub partial: bool,
    /// Where a batch given up on is recorded (an SQS queue's name).
    pub on_failure: Option<String>,
    /// `TRIM_HORIZON` or `LATEST`.
    pub starting: String,
    /// Batches of one shard handled at once (`ParallelizationFactor`).
    pub parallel: usize,
}

/// An Amazon MQ (RabbitMQ) event source mapping.
#[derive(Debug, Clone)]
pub struct BrokerMapping {
    /// The queues it reads.
    pub queues: Vec<String>,
    /// Messages per invocation.
    pub batch_size: usize,
    /// How long to gather a batch.
    pub window: Duration,
}

/// What invokes a function.
#[derive(Debug, Clone)]
pub enum Source {
    /// An EventBridge schedule: `rate(...)`.
    Schedule(Duration),
    /// A table's stream.
    Stream(StreamMapping),
    /// The broker.
    Broker(BrokerMapping),
}

/// One function of the template.
#[derive(Debug, Clone)]
pub struct Function {
    /// Its logical id.
    pub id: String,
    /// Its handler.
    pub handler: String,
    /// Its environment: the globals, then its own.
    pub env: BTreeMap<String, String>,
    /// Its timeout.
    pub timeout: Duration,
    /// Its memory, in MB.
    pub memory_mb: u64,
    /// Its reserved concurrency, if any.
    pub reserved: Option<usize>,
    /// What invokes it, besides the HTTP API.
    pub sources: Vec<Source>,
    /// Retries of a failed asynchronous invocation (a schedule's).
    pub async_retries: u32,
    /// Where a failed asynchronous invocation is recorded (an SQS queue's name).
    pub async_on_failure: Option<String>,
}

fn err(msg: impl Into<String>) -> Error {
    msg.into().into()
}

/// `rate(5 minutes)` as a duration.
pub fn parse_rate(expr: &str) -> Result<Duration, Error> {
    let inner = expr
        .strip_prefix("rate(")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            err(format!(
                "only rate(...) schedules are emulated, not {expr:?}"
            ))
        })?;
    let (n, unit) = inner
        .trim()
        .split_once(' ')
        .ok_or_else(|| err(format!("bad rate {expr:?}")))?;
    let n: u64 = n.parse().map_err(|_| err(format!("bad rate {expr:?}")))?;
    let secs = match unit.trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        _ => return Err(err(format!("bad rate unit in {expr:?}"))),
    };
    Ok(Duration::from_secs(n * secs))
}

/// The HTTP API's routes of a SAM template (`raw`, as JSON): each function's `HttpApi` events,
/// whatever the functions' conditions (see [`Template::routes`] for a stack's).
pub fn http_routes(raw: &Value) -> Vec<Route> {
    let mut out = vec![];
    for (id, r) in raw["Resources"].as_object().into_iter().flatten() {
        if r["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        for e in r["Properties"]["Events"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
        {
            if e["Type"] != "HttpApi" {
                continue;
            }
            let p = &e["Properties"];
            out.push(Route {
                method: p["Method"].as_str().unwrap_or("ANY").to_string(),
                path: p["Path"].as_str().unwrap_or_default().to_string(),
                timeout: Duration::from_millis(p["TimeoutInMillis"].as_u64().unwrap_or(30_000)),
                target: Target::Function(id.clone()),
                set_headers: vec![],
            });
        }
    }
    out
}

impl Template {
    /// Reads `path` (YAML), with parameter `overrides`.
    pub fn load(
        path: &std::path::Path,
        stack: &str,
        overrides: &[(String, String)],
    ) -> Result<Template, Error> {
        let text = std::fs::read_to_string(path)?;
        let raw: Value = serde_yaml::from_str(&text)?;
        let mut params = BTreeMap::new();
        for (name, p) in raw["Parameters"].as_object().into_iter().flatten() {
            let default = match &p["Default"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            params.insert(name.clone(), default);
        }
        for (k, v) in overrides {
            if !params.contains_key(k) {
                return Err(err(format!("the template has no parameter {k}")));
            }
            params.insert(k.clone(), v.clone());
        }
        Ok(Template {
            raw,
            stack: stack.to_string(),
            params,
            physical: BTreeMap::new(),
        })
    }

    /// Resources of one type that the stack has (their condition, if any, holds):
    /// `(logical id, properties)`.
    pub fn resources(&self, ty: &str) -> Vec<(String, Value)> {
        self.raw["Resources"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, r)| r["Type"] == ty && self.exists(r))
            .map(|(id, r)| (id.clone(), r["Properties"].clone()))
            .collect()
    }

    /// Whether the stack has a resource: it has no condition, or its condition holds.
    fn exists(&self, resource: &Value) -> bool {
        match resource["Condition"].as_str() {
            Some(c) => self.condition(c).unwrap_or(true),
            None => true,
        }
    }

    /// Records a resource's physical id (its `Ref`) and attributes.
    pub fn set_physical(&mut self, id: &str, reference: &str, attrs: &[(&str, String)]) {
        self.physical.insert(id.to_string(), reference.to_string());
        for (a, v) in attrs {
            self.physical.insert(format!("{id}.{a}"), v.clone());
        }
    }

    fn condition(&self, name: &str) -> Result<bool, Error> {
        let c = &self.raw["Conditions"][name];
        self.eval_condition(c)
    }

    fn eval_condition(&self, c: &Value) -> Result<bool, Error> {
        if let Some(args) = c.get("Fn::Equals").and_then(Value::as_array) {
            let a = self.resolve(&args[0])?;
            let b = self.resolve(&args[1])?;
            return Ok(a == b);
        }
        if let Some(args) = c.get("Fn::Not").and_then(Value::as_array) {
            return Ok(!self.eval_condition(&args[0])?);
        }
        if let Some(name) = c.get("Condition").and_then(Value::as_str) {
            return self.condition(name);
        }
        Err(err(format!("unsupported condition {c}")))
    }

    fn reference(&self, name: &str) -> Result<Value, Error> {
        Ok(match name {
            "AWS::StackName" => json!(self.stack),
            "AWS::Region" => json!(REGION),
            "AWS::AccountId" => json!(ACCOUNT),
            "AWS::Partition" => json!("aws"),
            "AWS::URLSuffix" => json!("amazonaws.com"),
            "AWS::NoValue" => Value::Null,
            _ => match (self.params.get(name), self.physical.get(name)) {
                (Some(p), _) => json!(p),
                (None, Some(r)) => json!(r),
                _ => return Err(err(format!("Ref {name} is not known (yet)"))),
            },
        })
    }

    fn sub(&self, s: &str) -> Result<String, Error> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let j = rest[i..]
                .find('}')
                .ok_or_else(|| err(format!("unclosed ${{ in {s:?}")))?;
            let name = &rest[i + 2..i + j];
            let v = match name.split_once('.') {
                Some((id, attr)) => self
                    .physical
                    .get(&format!("{id}.{attr}"))
                    .cloned()
                    .ok_or_else(|| err(format!("${{{name}}} is not known (yet)")))?,
                None => match self.reference(name)? {
                    Value::String(v) => v,
                    other => other.to_string(),
                },
            };
            out.push_str(&v);
            rest = &rest[i + j + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `v` with every intrinsic function resolved; `AWS::NoValue` removes a key.
    pub fn resolve(&self, v: &Value) -> Result<Value, Error> {
        match v {
            Value::Object(m) if m.len() == 1 => {
                let (k, arg) = m.iter().next().expect("one key");
                match k.as_str() {
                    "Ref" => self.reference(arg.as_str().unwrap_or_default()),
                    "Fn::Sub" => Ok(json!(self.sub(arg.as_str().unwrap_or_default())?)),
                    "Fn::GetAtt" => {
                        let a = arg.as_array().ok_or_else(|| err("bad GetAtt"))?;
                        let key = format!(
                            "{}.{}",
                            a[0].as_str().unwrap_or_default(),
                            a[1].as_str().unwrap_or_default()
                        );
                        self.physical
                            .get(&key)
                            .map(|v| json!(v))
                            .ok_or_else(|| err(format!("GetAtt {key} is not known (yet)")))
                    }
                    "Fn::If" => {
                        let a = arg.as_array().ok_or_else(|| err("bad If"))?;
                        let c = self.condition(a[0].as_str().unwrap_or_default())?;
                        self.resolve(&a[if c { 1 } else { 2 }])
                    }
                    _ => self.resolve_map(m),
                }
            }
            Value::Object(m) => self.resolve_map(m),
            Value::Array(a) => {
                let mut out = vec![];
                for x in a {
                    let r = self.resolve(x)?;
                    if !r.is_null() {
                        out.push(r);
                    }
                }
                Ok(Value::Array(out))
            }
            other => Ok(other.clone()),
        }
    }

    fn resolve_map(&self, m: &Map<String, Value>) -> Result<Value, Error> {
        let mut out = Map::new();
        for (k, v) in m {
            let r = self.resolve(v)?;
            if !r.is_null() {
                out.insert(k.clone(), r);
            }
        }
        Ok(Value::Object(out))
    }

    fn globals_env(&self) -> Result<BTreeMap<String, String>, Error> {
        let vars = self.resolve(&self.raw["Globals"]["Function"]["Environment"]["Variables"])?;
        Ok(strings(&vars))
    }

    /// The HTTP API's routes: the events of the functions the stack has, and its
    /// `AWS::ApiGatewayV2::Route`s to an HTTP proxy integration on an ECS service's registry.
    pub fn routes(&self) -> Result<Vec<Route>, Error> {
        let functions: Vec<String> = self
            .resources("AWS::Serverless::Function")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut out: Vec<Route> = http_routes(&self.raw)
            .into_iter()
            .filter(|r| {
                r.function()
                    .is_some_and(|f| functions.iter().any(|x| x == f))
            })
            .collect();
        for (id, p) in self.resources("AWS::ApiGatewayV2::Route") {
            let key = p["RouteKey"].as_str().unwrap_or_default();
            let (method, path) = key
                .split_once(' ')
                .ok_or_else(|| err(format!("{id}: route key {key:?}")))?;
            let target = p["Target"]["Fn::Sub"].as_str().unwrap_or_default();
            let integration = target
                .strip_prefix("integrations/${")
                .and_then(|t| t.strip_suffix('}'))
                .ok_or_else(|| err(format!("{id}: target {target:?} is not emulated")))?;
            let (_, ip) = self
                .resources("AWS::ApiGatewayV2::Integration")
                .into_iter()
                .find(|(i, _)| i == integration)
                .ok_or_else(|| err(format!("{id}: no integration {integration}")))?;
            if ip["IntegrationType"] != "HTTP_PROXY" || ip["ConnectionType"] != "VPC_LINK" {
                return Err(err(format!(
                    "{integration}: only private HTTP proxies are emulated"
                )));
            }
            // The integration reaches a Cloud Map service; the ECS service registered in it.
            let registry = ip["IntegrationUri"]["Fn::GetAtt"][0]
                .as_str()
                .unwrap_or_default();
            let service = self
                .resources("AWS::ECS::Service")
                .into_iter()
                .find(|(_, sp)| {
                    sp["ServiceRegistries"][0]["RegistryArn"]["Fn::GetAtt"][0] == registry
                })
                .map(|(sid, _)| sid)
                .ok_or_else(|| err(format!("{integration}: no ECS service in {registry}")))?;
            let mut set_headers = vec![];
            for (k, v) in ip["RequestParameters"].as_object().into_iter().flatten() {
                let (Some(name), Some(var @ ("$context.domainName" | "$context.requestId"))) =
                    (k.strip_prefix("overwrite:header."), v.as_str())
                else {
                    return Err(err(format!("{integration}: {k}: {v} is not emulated")));
                };
                set_headers.push((name.to_string(), var.to_string()));
            }
            out.push(Route {
                method: method.to_string(),
                path: path.to_string(),
                timeout: Duration::from_millis(ip["TimeoutInMillis"].as_u64().unwrap_or(30_000)),
                target: Target::Service(service),
                set_headers,
            });
        }
        Ok(out)
    }

    /// The stack's ECS services, each with its task definition's one container resolved.
    pub fn services(&self) -> Result<Vec<Service>, Error> {
        let mut out = vec![];
        for (id, p) in self.resources("AWS::ECS::Service") {
            let td = p["TaskDefinition"]["Ref"].as_str().unwrap_or_default();
            let (_, tp) = self
                .resources("AWS::ECS::TaskDefinition")
                .into_iter()
                .find(|(t, _)| t == td)
                .ok_or_else(|| err(format!("{id}: no task definition {td}")))?;
            let c = self.resolve(&tp["ContainerDefinitions"][0])?;
            let pairs = |v: &Value, value: &str| -> Vec<(String, String)> {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        let s = match &e[value] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (e["Name"].as_str().unwrap_or_default().to_string(), s)
                    })
                    .collect()
            };
            let tasks = self.resolve(&p["DesiredCount"])?;
            out.push(Service {
                env: pairs(&c["Environment"], "Value").into_iter().collect(),
                secrets: pairs(&c["Secrets"], "ValueFrom"),
                tasks: match &tasks {
                    Value::String(s) => s.parse().unwrap_or(1),
                    other => other.as_u64().unwrap_or(1) as usize,
                },
                id,
            });
        }
        Ok(out)
    }

    /// Every function, resolved (the resources its events name must have been created).
    pub fn functions(&self) -> Result<Vec<Function>, Error> {
        let globals = self.globals_env()?;
        let mut out = vec![];
        for (id, props) in self.resources("AWS::Serverless::Function") {
            let mut env = globals.clone();
            env.extend(strings(&self.resolve(&props["Environment"]["Variables"])?));
            let mut sources = vec![];
            for e in props["Events"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(_, e)| e)
            {
                let p = self.resolve(&e["Properties"])?;
                match e["Type"].as_str().unwrap_or_default() {
                    "HttpApi" => {}
                    "Schedule" => sources.push(Source::Schedule(parse_rate(
                        p["Schedule"].as_str().unwrap_or_default(),
                    )?)),
                    "DynamoDB" => sources.push(Source::Stream(StreamMapping {
                        stream_arn: p["Stream"].as_str().unwrap_or_default().to_string(),
                        batch_size: p["BatchSize"].as_u64().unwrap_or(100) as usize,
                        window: Duration::from_secs(
                            p["MaximumBatchingWindowInSeconds"].as_u64().unwrap_or(0),
                        ),
                        filters: p["FilterCriteria"]["Filters"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|f| f["Pattern"].as_str())
                            .map(serde_json::from_str)
                            .collect::<Result<_, _>>()?,
                        // A number, or a parameter's value (a string).
                        retries: match &p["MaximumRetryAttempts"] {
                            Value::String(s) => s.parse::<i64>().ok(),
                            v => v.as_i64(),
                        }
                        .filter(|r| *r >= 0)
                        .map(|r| r as u32),
                        bisect: p["BisectBatchOnFunctionError"] == json!(true),
                        partial: p["FunctionResponseTypes"]
                            .as_array()
                            .is_some_and(|a| a.contains(&json!("ReportBatchItemFailures"))),
                        on_failure: queue_name(&p["DestinationConfig"]["OnFailure"]["Destination"]),
                        starting: p["StartingPosition"]
                            .as_str()
                            .unwrap_or("TRIM_HORIZON")
                            .to_string(),
                        parallel: p["ParallelizationFactor"]
                            .as_u64()
                            .unwrap_or(1)
                            .clamp(1, 10) as usize,
                    })),
                    "MQ" => sources.push(Source::Broker(BrokerMapping {
                        queues: strings_of(&p["Queues"]),
                        batch_size: p["BatchSize"].as_u64().unwrap_or(100) as usize,
                        window: Duration::from_millis(
                            p["MaximumBatchingWindowInSeconds"]
                                .as_u64()
                                .map_or(500, |s| s * 1000),
                        ),
                    })),
                    other => return Err(err(format!("{id}: event type {other} is not emulated"))),
                }
            }
            let invoke = self.resolve(&props["EventInvokeConfig"])?;
            out.push(Function {
                handler: props["Handler"].as_str().unwrap_or_default().to_string(),
                env,
                timeout: Duration::from_secs(props["Timeout"].as_u64().unwrap_or(3)),
                memory_mb: props["MemorySize"].as_u64().unwrap_or(128),
                reserved: self
                    .resolve(&props["ReservedConcurrentExecutions"])?
                    .as_u64()
                    .map(|n| n as usize),
                sources,
                async_retries: invoke["MaximumRetryAttempts"].as_u64().unwrap_or(2) as u32,
                async_on_failure: queue_name(
                    &invoke["DestinationConfig"]["OnFailure"]["Destination"],
                ),
                id,
            });
        }
        Ok(out)
    }
}

/// The queue name in an SQS ARN.
fn queue_name(arn: &Value) -> Option<String> {
    arn.as_str()
        .and_then(|a| a.rsplit(':').next())
        .map(String::from)
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect()
}

fn strings_of(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_durations() {
        assert_eq!(
            parse_rate("rate(1 minute)").unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            parse_rate("rate(5 minutes)").unwrap(),
            Duration::from_secs(300)
        );
        assert_eq!(
            parse_rate("rate(1 hour)").unwrap(),
            Duration::from_secs(3600)
        );
        assert!(parse_rate("cron(0 * * * ? *)").is_err());
    }
}
