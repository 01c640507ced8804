//! The auth service's endpoints (`/api/auth/v1/`): authorise with upstream's scopes, call the
//! [`crate::auth::AuthService`], render. No behaviour lives here.

use super::{Api, Call};
use crate::auth::{AuthService, Outcome, Realm, RequestFacts};
use crate::error::{ApiError, ApiResult};
use crate::model::string_list;
use crate::scopes::ScopeExpr::{self, AllOf};
use crate::time::Ts;
use serde_json::{json, Value};

use super::routes::Route;

type Reply = ApiResult<(u16, Value)>;

fn ok(v: Value) -> Reply {
    Ok((200, v))
}

/// `<verb>` on the named entity plus every scope being granted (upstream's rule: a caller
/// can only hand out scopes it holds).
fn granting(scope: String, body: &Value) -> ScopeExpr {
    let mut all = vec![ScopeExpr::Scope(scope)];
    all.extend(
        string_list(&body["scopes"])
            .into_iter()
            .map(ScopeExpr::Scope),
    );
    AllOf(all)
}

/// Far enough ahead to mean "never" in an `expires` field.
fn never() -> Ts {
    Ts(32_503_680_000_000)
}

/// `authenticateHawk`: the verdict on a request another service received.
async fn authenticate_hawk(auth: &AuthService, body: &Value, now: Ts) -> ApiResult<Value> {
    let s = |k: &str| body[k].as_str().unwrap_or_default();
    let port = body["port"]
        .as_u64()
        .or_else(|| body["port"].as_str().and_then(|p| p.parse().ok()))
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| ApiError::input("port must be a number 0..65535"))?;
    let host = s("host").to_ascii_lowercase();
    let facts = RequestFacts {
        method: &s("method").to_ascii_uppercase(),
        resource: s("resource"),
        host: &host,
        port,
        authorization: body["authorization"].as_str(),
        // The body stays with the calling service, which checks the returned `hash`.
        payload: None,
    };
    let expires = |e: Option<Ts>| e.unwrap_or_else(never);
    Ok(
        match auth.authenticate(&facts, now, &Realm::Deployment).await? {
            Outcome::Failed(message) => json!({ "status": "auth-failed", "message": message }),
            Outcome::Success(a) if a.client_id.is_none() => json!({
                "status": "no-auth", "scheme": "none", "scopes": a.scopes, "expires": expires(None),
            }),
            Outcome::Success(a) => {
                let mut v = json!({
                    "status": "auth-success", "scheme": "hawk", "clientId": a.client_id,
                    "scopes": a.scopes, "expires": expires(a.expires),
                });
                if let Some(h) = a.hash {
                    v["hash"] = json!(h);
                }
                v
            }
        },
    )
}

/// Routes a matched auth call to its handler.
pub(super) async fn dispatch(api: &Api, route: &Route, call: Call) -> Reply {
    let auth = &api.auth;
    let id = |name: &str| call.param(name).to_string();
    if let Some(reply) = super::monitoring(api, route.name) {
        return ok(reply);
    }
    match route.name {
        "listClients" => {
            let prefix = call.query.get("prefix").map(String::as_str);
            ok(auth.list_clients(prefix, &call.page()?).await?)
        }
        "client" => ok(auth.get_client(&id("clientId")).await?),
        "createClient" => {
            let cid = id("clientId");
            call.caller
                .authorize(&granting(format!("auth:create-client:{cid}"), &call.body))?;
            ok(auth.create_client(&cid, &call.body, call.now).await?)
        }
        "resetAccessToken" => {
            let cid = id("clientId");
            call.caller
                .authorize(&ScopeExpr::Scope(format!("auth:reset-access-token:{cid}")))?;
            ok(auth.reset_access_token(&cid, call.now).await?)
        }
        "enableClient" | "disableClient" => {
            let cid = id("clientId");
            let disable = route.name == "disableClient";
            let verb = if disable { "disable" } else { "enable" };
            call.caller
                .authorize(&ScopeExpr::Scope(format!("auth:{verb}-client:{cid}")))?;
            ok(auth.set_disabled(&cid, disable, call.now).await?)
        }
        "deleteClient" => {
            let cid = id("clientId");
            call.caller
                .authorize(&ScopeExpr::Scope(format!("auth:delete-client:{cid}")))?;
            auth.delete_client(&cid).await?;
            Ok((204, Value::Null))
        }
        "listRoles" => ok(auth.list_roles().await?),
        "role" => ok(auth.get_role(&id("roleId")).await?),
        "createRole" => {
            let rid = id("roleId");
            call.caller
                .authorize(&granting(format!("auth:create-role:{rid}"), &call.body))?;
            ok(auth.create_role(&rid, &call.body, call.now).await?)
        }
        "deleteRole" => {
            let rid = id("roleId");
            call.caller
                .authorize(&ScopeExpr::Scope(format!("auth:delete-role:{rid}")))?;
            auth.delete_role(&rid).await?;
            Ok((204, Value::Null))
        }
        "expandScopes" => {
            ok(json!({ "scopes": auth.expand(&string_list(&call.body["scopes"])).await? }))
        }
        "currentScopes" => ok(json!({ "scopes": call.caller.scopes })),
        "authenticateHawk" => ok(authenticate_hawk(auth, &call.body, call.now).await?),
        "testAuthenticate" | "testAuthenticateGet" => {
            let required = if route.name == "testAuthenticate" {
                string_list(&call.body["requiredScopes"])
            } else {
                vec!["test:authenticate-get".to_string()]
            };
            call.caller
                .authorize(&AllOf(required.into_iter().map(ScopeExpr::Scope).collect()))?;
            ok(json!({ "clientId": call.caller.client_id, "scopes": call.caller.scopes }))
        }
        other => Err(ApiError::internal(format!("route {other} has no handler"))),
    }
}
