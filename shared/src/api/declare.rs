//! How an endpoint is declared: one [`Endpoint`] value per endpoint, in the style of
//! upstream's `builder.declare({method, route, name, scopes, input, output}, handler)`,
//! grouped into one file per resource and into [`Service`]s. The router, the Lambda
//! functions, the SAM template and the scope tests all read these lists.

use super::caller::Caller;
use super::Api;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::{parse_run_id, TaskId, TaskQueueId};
use crate::page::{PageReq, MAX_PAGE};
use crate::scopes::{Params, ScopeExpr, Template};
use crate::time::Ts;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use std::collections::HashMap;

/// The handler of an endpoint: parse, authorise, call one domain operation, render.
pub type Handler = for<'a> fn(&'a Api, &'a mut Call) -> BoxFuture<'a, ApiResult<Reply>>;

/// Turns an `async fn(&Api, &mut Call) -> ApiResult<Reply>` into a [`Handler`].
#[macro_export]
macro_rules! handler {
    ($f:path) => {
        |api, call| Box::pin($f(api, call))
    };
}

/// HTTP methods the services use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET.
    Get,
    /// PUT.
    Put,
    /// POST.
    Post,
    /// DELETE.
    Delete,
}

impl Verb {
    /// The method.
    pub fn method(self) -> http::Method {
        match self {
            Verb::Get => http::Method::GET,
            Verb::Put => http::Method::PUT,
            Verb::Post => http::Method::POST,
            Verb::Delete => http::Method::DELETE,
        }
    }

    /// True if `m` is this verb.
    pub fn is(self, m: &http::Method) -> bool {
        *m == self.method()
    }
}

/// The scopes an endpoint requires.
#[derive(Debug, Clone, Copy)]
pub enum Scopes {
    /// None: anyone may call it.
    None,
    /// This template, filled from the request by the handler ([`Call::authorize`]).
    Template(Template),
    /// An expression the handler builds from what the domain says must be authorised (the
    /// scheduler's graphs, whose tasks each need createTask's scopes); described here.
    Dynamic(&'static str),
}

/// How a function may use a table or the artifact buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only.
    Read,
    /// Reads and writes.
    Write,
}

/// Something an endpoint's function needs beyond reading the `auth` table (which every
/// endpoint does, to authenticate): its IAM policies in the SAM template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A table (by its name without prefix), with its indexes.
    Table(&'static str, Access),
    /// Both artifact buckets (presigned URLs carry the function's own rights).
    Buckets(Access),
}

/// Whose credentials authenticate a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authn {
    /// The deployment's clients and roles.
    Deployment,
    /// Upstream's fixed test client (`testAuthenticate`, `testAuthenticateGet`).
    TestClient,
}

/// What a successful call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Success {
    /// 200, with the output schema's body.
    Ok,
    /// 204, no body.
    NoContent,
    /// 303 to where the bytes are (`Location`), the body saying the same.
    Redirect,
    /// [`Success::Redirect`], or for an error artifact `424` with `{reason, message}` (as
    /// upstream's getArtifact).
    ArtifactRedirect,
}

impl Success {
    /// True if a reply with `status` is this kind of success (an error has status ≥ 400,
    /// except an error artifact's 424).
    pub fn allows(self, status: u16) -> bool {
        match self {
            Success::Ok => status == 200,
            Success::NoContent => status == 204,
            Success::Redirect => status == 303,
            Success::ArtifactRedirect => status == 303 || status == 424,
        }
    }
}

/// The query arguments of a paged listing.
pub const PAGED: &[&str] = &["continuationToken", "limit"];

/// One endpoint's declaration.
#[derive(Clone, Copy)]
pub struct Endpoint {
    /// Upstream's endpoint name.
    pub name: &'static str,
    /// HTTP method.
    pub verb: Verb,
    /// Route under the service's prefix, with `<param>`, and `<*param>` for one that may hold
    /// `/` (raw or `%2F`).
    pub route: &'static str,
    /// One line on what it does.
    pub title: &'static str,
    /// Required scopes.
    pub scopes: Scopes,
    /// Input schema name.
    pub input: Option<&'static str>,
    /// Output schema name.
    pub output: Option<&'static str>,
    /// The query arguments its handler reads ([`Call::query_arg`]).
    pub query: &'static [&'static str],
    /// What a successful call answers.
    pub success: Success,
    /// Error codes it may answer besides those every endpoint of its shape may (see
    /// [`Endpoint::error_codes`]).
    pub errors: &'static [ErrorCode],
    /// What its function needs in AWS.
    pub needs: &'static [Need],
    /// How callers authenticate.
    pub authn: Authn,
    /// May run up to the gateway's limit rather than a quick call's (see
    /// [`Endpoint::long_running`]).
    pub long_running: bool,
    /// Set when its calls hold their function's instance while they wait (a long poll):
    /// deployed with a reservation of its own (see [`Reservation`]).
    pub reservation: Option<Reservation>,
    /// A claim route: with the template's `ClaimMode=service`, the always-on claim service
    /// serves it in place of its function (see [`Endpoint::claim_route`]).
    pub claim_route: bool,
    /// The handler.
    pub handler: Handler,
}

/// The deployment of an endpoint whose calls hold their function's instance while they wait
/// (claimWork's long poll): every waiting call is an instance, so its concurrency is reserved
/// (idle workers cannot take the account's concurrency from everything else), and its memory
/// is the least, as it mostly waits.
#[derive(Debug, Clone, Copy)]
pub struct Reservation {
    /// The template parameter that sets its reserved concurrency (`ClaimWorkConcurrency`).
    pub parameter: &'static str,
    /// Its memory, in MB.
    pub memory_mb: u32,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("verb", &self.verb)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// An endpoint that needs no scopes, takes no body and has no output schema; the builder
    /// methods below add the rest.
    pub const fn new(
        name: &'static str,
        verb: Verb,
        route: &'static str,
        handler: Handler,
    ) -> Self {
        Endpoint {
            name,
            verb,
            route,
            title: "",
            scopes: Scopes::None,
            input: None,
            output: None,
            query: &[],
            success: Success::Ok,
            errors: &[],
            needs: &[],
            authn: Authn::Deployment,
            long_running: false,
            reservation: None,
            claim_route: false,
            handler,
        }
    }

    /// What it does, in one line.
    pub const fn title(self, title: &'static str) -> Self {
        Endpoint { title, ..self }
    }

    /// The scopes it requires.
    pub const fn scopes(self, t: Template) -> Self {
        Endpoint {
            scopes: Scopes::Template(t),
            ..self
        }
    }

    /// Scopes its handler builds from the domain's answer (see [`Scopes::Dynamic`]).
    pub const fn dynamic_scopes(self, what: &'static str) -> Self {
        Endpoint {
            scopes: Scopes::Dynamic(what),
            ..self
        }
    }

    /// Its input schema.
    pub const fn input(self, schema: &'static str) -> Self {
        Endpoint {
            input: Some(schema),
            ..self
        }
    }

    /// Its output schema.
    pub const fn output(self, schema: &'static str) -> Self {
        Endpoint {
            output: Some(schema),
            ..self
        }
    }

    /// The query arguments its handler reads.
    pub const fn query(self, query: &'static [&'static str]) -> Self {
        Endpoint { query, ..self }
    }

    /// What it answers when it succeeds.
    pub const fn success(self, success: Success) -> Self {
        Endpoint { success, ..self }
    }

    /// Error codes it may answer besides the usual ones.
    pub const fn errors(self, errors: &'static [ErrorCode]) -> Self {
        Endpoint { errors, ..self }
    }

    /// What its function needs in AWS.
    pub const fn needs(self, needs: &'static [Need]) -> Self {
        Endpoint { needs, ..self }
    }

    /// One call may take up to the gateway's 30 s rather than a quick call's few: it waits
    /// for work, or writes thousands of items (a task's 10,000 dependency edges, a graph's
    /// 1,000 tasks). The template gives its function and its route that long.
    pub const fn long_running(self) -> Self {
        Endpoint {
            long_running: true,
            ..self
        }
    }

    /// Its calls hold their function's instance while they wait: deployed as `reservation`
    /// says. Such an endpoint is long-running.
    pub const fn reserved(self, reservation: Reservation) -> Self {
        Endpoint {
            reservation: Some(reservation),
            long_running: true,
            ..self
        }
    }

    /// A claim route (claimWork, claimTask, reclaimTask): a worker's calls that an operator
    /// may serve from one always-on process rather than functions, as idle workers' long
    /// polls cost per instance-second on Lambda and nearly nothing on a server.
    pub const fn claim_route(self) -> Self {
        Endpoint {
            claim_route: true,
            ..self
        }
    }

    /// Authenticated against upstream's fixed test client.
    pub const fn test_client(self) -> Self {
        Endpoint {
            authn: Authn::TestClient,
            ..self
        }
    }

    /// Every error code it may answer: a body that is not JSON, a bad parameter or query
    /// argument, a body over the limit or bad credentials, anywhere; missing scopes where it
    /// requires some; a missing resource where the route names one; a conflict where it
    /// changes something; and those it declares.
    pub fn error_codes(&self) -> Vec<ErrorCode> {
        let mut out = vec![
            ErrorCode::MalformedPayload,
            ErrorCode::InvalidRequestArguments,
            ErrorCode::InputError,
            ErrorCode::AuthenticationFailed,
            ErrorCode::InputTooLarge,
        ];
        if self.input.is_some() {
            out.push(ErrorCode::InputValidationError);
        }
        if !matches!(self.scopes, Scopes::None) {
            out.push(ErrorCode::InsufficientScopes);
        }
        if self.route.contains('<') {
            out.push(ErrorCode::ResourceNotFound);
        }
        if self.verb != Verb::Get {
            out.push(ErrorCode::RequestConflict);
        }
        for c in self.errors {
            if !out.contains(c) {
                out.push(*c);
            }
        }
        out
    }
}

/// How a service's endpoints are cut into Lambda functions.
#[derive(Debug, Clone, Copy)]
pub enum Functions {
    /// One function per endpoint; its handler is the endpoint's name, behind `prefix` when
    /// there is one (`scheduler` + `createTaskGraph` = `schedulerCreateTaskGraph`).
    PerEndpoint {
        /// Prefix of the handler names (`""` for none).
        prefix: &'static str,
    },
    /// One function for the whole service.
    One {
        /// Its handler name.
        handler: &'static str,
    },
}

/// A service: its endpoints under one prefix.
#[derive(Debug)]
pub struct Service {
    /// `queue`, `auth`, `scheduler`, `object`.
    pub name: &'static str,
    /// What its functions' descriptions call it (`Queue`).
    pub title: &'static str,
    /// Every route is served under this prefix, e.g. `/api/queue/v1`.
    pub prefix: &'static str,
    /// Its endpoints, one list per resource, in matching order.
    pub groups: &'static [&'static [Endpoint]],
    /// How it is cut into Lambda functions.
    pub functions: Functions,
    /// The exchanges it publishes to, under their default prefix.
    pub exchanges: Option<Exchanges>,
    /// True for the one service whose function also serves the deployment's documents: the
    /// schemas, references and the other services' OpenAPI documents.
    pub serves_documents: bool,
    /// True for the service that is the authority on clients and roles (auth): not served
    /// when authentication is delegated to an existing deployment.
    pub authority: bool,
}

/// A service's exchanges.
#[derive(Debug)]
pub struct Exchanges {
    /// Their default prefix (`exchange/taskcluster-queue/v1/`).
    pub prefix: &'static str,
    /// The exchanges.
    pub list: &'static [crate::routing::Exchange],
}

impl Service {
    /// Every endpoint, in matching order.
    pub fn endpoints(&self) -> impl Iterator<Item = &'static Endpoint> + '_ {
        self.groups.iter().flat_map(|g| g.iter())
    }

    /// The endpoint named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&'static Endpoint> {
        self.endpoints().find(|e| e.name == name)
    }

    /// The Lambda handler name of the function that serves `e`.
    pub fn handler_name(&self, e: &Endpoint) -> String {
        match self.functions {
            Functions::One { handler } => handler.to_string(),
            Functions::PerEndpoint { prefix: "" } => e.name.to_string(),
            Functions::PerEndpoint { prefix } => {
                let mut chars = e.name.chars();
                let first = chars.next().map(|c| c.to_ascii_uppercase());
                format!(
                    "{prefix}{}{}",
                    first.into_iter().collect::<String>(),
                    chars.as_str()
                )
            }
        }
    }
}

/// A successful reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// JSON body (none for 204).
    pub body: Value,
    /// Headers besides the standard ones.
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: Value) -> ApiResult<Reply> {
        Ok(Reply {
            status: 200,
            body,
            headers: vec![],
        })
    }

    /// 204 No Content.
    pub fn no_content() -> ApiResult<Reply> {
        Ok(Reply {
            status: 204,
            body: Value::Null,
            headers: vec![],
        })
    }

    /// `body` with `continuationToken` set when another page follows.
    pub fn page(mut body: Value, token: Option<String>) -> ApiResult<Reply> {
        if let Some(t) = token {
            body["continuationToken"] = json!(t);
        }
        Reply::ok(body)
    }
}

/// What a handler sees: the checked request and the authenticated caller.
pub struct Call {
    /// The endpoint being served.
    pub endpoint: &'static Endpoint,
    /// Decoded URL parameters by name.
    pub(super) params: HashMap<&'static str, String>,
    /// Query arguments (read through [`Call::query_arg`]).
    pub(super) query: HashMap<String, String>,
    /// The validated body (or `{}`).
    pub body: Value,
    /// The authenticated caller.
    pub caller: Caller,
    /// When the request arrived.
    pub now: Ts,
    /// Set once the caller was checked against the endpoint's scopes.
    pub(super) authorized: bool,
}

impl Call {
    /// A URL parameter (always present: the route matched).
    pub fn param(&self, name: &str) -> &str {
        self.params
            .get(name)
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The `taskId` parameter.
    pub fn task_id(&self) -> ApiResult<TaskId> {
        TaskId::parse(self.param("taskId"))
    }

    /// The `taskGroupId` parameter.
    pub fn task_group_id(&self) -> ApiResult<TaskId> {
        TaskId::parse(self.param("taskGroupId"))
    }

    /// The `runId` parameter.
    pub fn run_id(&self) -> ApiResult<u32> {
        parse_run_id(self.param("runId"))
    }

    /// The `taskQueueId` parameter.
    pub fn task_queue_id(&self) -> ApiResult<TaskQueueId> {
        TaskQueueId::parse(self.param("taskQueueId"))
    }

    /// The query argument `name`, which the endpoint must declare (its OpenAPI document lists
    /// the declared ones): reading an undeclared one is a bug, caught in debug builds.
    pub fn query_arg(&self, name: &str) -> Option<&str> {
        debug_assert!(
            self.endpoint.query.contains(&name),
            "{} reads the undeclared query argument {name}",
            self.endpoint.name
        );
        self.query.get(name).map(String::as_str)
    }

    /// A string field of the body (`""` if absent).
    pub fn body_str(&self, key: &str) -> &str {
        self.body[key].as_str().unwrap_or_default()
    }

    /// The `limit` (digits only; at most [`MAX_PAGE`]) and `continuationToken` query
    /// arguments of a listing.
    pub fn page(&self) -> ApiResult<PageReq> {
        let limit = match self.query_arg("limit") {
            None => MAX_PAGE,
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                l.parse::<usize>().unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE)
            }
            Some(l) => {
                return Err(ApiError::bad_argument(format!(
                    "limit {l:?} must match ^[0-9]+$"
                )))
            }
        };
        Ok(PageReq {
            limit,
            token: self
                .query_arg("continuationToken")
                .filter(|t| !t.is_empty())
                .map(String::from),
        })
    }

    /// Checks the caller against the endpoint's declared scopes, filled with `params`:
    /// `403 InsufficientScopes` unless satisfied. Every handler of an endpoint with scopes
    /// calls this (or [`Call::authorize_expr`]) before it changes anything.
    pub fn authorize(&mut self, params: &Params) -> ApiResult<()> {
        match self.endpoint.scopes {
            Scopes::None => {
                self.authorized = true;
                Ok(())
            }
            Scopes::Template(t) => {
                let expr = t.render(params).map_err(ApiError::internal)?;
                self.authorize_expr(&expr)
            }
            Scopes::Dynamic(_) => Err(ApiError::internal(format!(
                "{} declares dynamic scopes: its handler must build the expression",
                self.endpoint.name
            ))),
        }
    }

    /// Checks the caller against `expr` (for [`Scopes::Dynamic`], and each further name of
    /// an artifact link chain).
    pub fn authorize_expr(&mut self, expr: &ScopeExpr) -> ApiResult<()> {
        self.caller.authorize(expr)?;
        self.authorized = true;
        Ok(())
    }
}
