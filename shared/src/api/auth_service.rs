//! The auth service's endpoints (`/api/auth/v1/`): small and rarely called, so one Lambda
//! function serves all of them. The [`crate::auth::AuthService`] does the work.

use super::declare::{
    Access, Call, Endpoint, Functions, Need, Reply, Service, Success, Verb, PAGED,
};
use super::endpoints::monitoring;
use super::Api;
use crate::auth::{Outcome, Realm, RequestFacts};
use crate::error::{ApiError, ApiResult};
use crate::handler;
use crate::json::string_list;
use crate::records::auth::AUTH as AUTH_TABLE;
use crate::scopes::{Params, Template};
use crate::time::Ts;
use serde_json::json;

const READ: &[Need] = &[Need::Table(AUTH_TABLE, Access::Read)];
const WRITE: &[Need] = &[Need::Table(AUTH_TABLE, Access::Write)];

/// Clients, roles, scopes and authentication.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::new(
        "listClients",
        Verb::Get,
        "/clients/",
        handler!(list_clients),
    )
    .title("Clients, by clientId")
    .output("list-clients-response")
    .query(&["prefix", "continuationToken", "limit"])
    .needs(READ),
    Endpoint::new(
        "client",
        Verb::Get,
        "/clients/<*clientId>",
        handler!(client),
    )
    .title("A client")
    .output("get-client-response")
    .needs(READ),
    Endpoint::new(
        "createClient",
        Verb::Put,
        "/clients/<*clientId>",
        handler!(create_client),
    )
    .title("Create a client with scopes the caller holds")
    .scopes(Template::AllOf(&[
        Template::Scope("auth:create-client:<clientId>"),
        Template::For {
            var: "scope",
            in_: "scopes",
            each: "<scope>",
        },
    ]))
    .input("create-client-request")
    .output("create-client-response")
    .needs(WRITE),
    Endpoint::new(
        "resetAccessToken",
        Verb::Post,
        "/clients/<*clientId>/reset",
        handler!(reset_access_token),
    )
    .title("Give a client a new accessToken")
    .scopes(Template::Scope("auth:reset-access-token:<clientId>"))
    .output("create-client-response")
    .needs(WRITE),
    Endpoint::new(
        "enableClient",
        Verb::Post,
        "/clients/<*clientId>/enable",
        handler!(enable_client),
    )
    .title("Enable a client")
    .scopes(Template::Scope("auth:enable-client:<clientId>"))
    .output("get-client-response")
    .needs(WRITE),
    Endpoint::new(
        "disableClient",
        Verb::Post,
        "/clients/<*clientId>/disable",
        handler!(disable_client),
    )
    .title("Disable a client")
    .scopes(Template::Scope("auth:disable-client:<clientId>"))
    .output("get-client-response")
    .needs(WRITE),
    Endpoint::new(
        "updateClient",
        Verb::Post,
        "/clients/<*clientId>",
        handler!(update_client),
    )
    .title("Update a client; the scopes it adds must be the caller's")
    .scopes(Template::AllOf(&[
        Template::Scope("auth:update-client:<clientId>"),
        Template::For {
            var: "scope",
            in_: "scopesAdded",
            each: "<scope>",
        },
    ]))
    .input("create-client-request")
    .output("get-client-response")
    .needs(WRITE),
    Endpoint::new(
        "deleteClient",
        Verb::Delete,
        "/clients/<*clientId>",
        handler!(delete_client),
    )
    .title("Delete a client")
    .scopes(Template::Scope("auth:delete-client:<clientId>"))
    .success(Success::NoContent)
    .needs(WRITE),
    Endpoint::new("listRoles", Verb::Get, "/roles/", handler!(list_roles))
        .title("Every role")
        .output("list-roles-response")
        .needs(READ),
    Endpoint::new(
        "listRoleIds",
        Verb::Get,
        "/roleids/",
        handler!(list_role_ids),
    )
    .title("Every roleId, a page at a time")
    .output("list-role-ids-response")
    .query(PAGED)
    .needs(READ),
    Endpoint::new("listRoles2", Verb::Get, "/roles2/", handler!(list_roles2))
        .title("Every role, a page at a time")
        .output("list-roles2-response")
        .query(PAGED)
        .needs(READ),
    Endpoint::new("role", Verb::Get, "/roles/<*roleId>", handler!(role))
        .title("A role")
        .output("get-role-response")
        .needs(READ),
    Endpoint::new(
        "createRole",
        Verb::Put,
        "/roles/<*roleId>",
        handler!(create_role),
    )
    .title("Create or update a role with scopes the caller holds")
    .scopes(Template::AllOf(&[
        Template::Scope("auth:create-role:<roleId>"),
        Template::For {
            var: "scope",
            in_: "scopes",
            each: "<scope>",
        },
    ]))
    .input("create-role-request")
    .output("get-role-response")
    .needs(WRITE),
    Endpoint::new(
        "updateRole",
        Verb::Post,
        "/roles/<*roleId>",
        handler!(update_role),
    )
    .title("Update a role; the scopes it adds must be the caller's")
    .scopes(Template::AllOf(&[
        Template::Scope("auth:update-role:<roleId>"),
        Template::For {
            var: "scope",
            in_: "scopesAdded",
            each: "<scope>",
        },
    ]))
    .input("create-role-request")
    .output("get-role-response")
    .needs(WRITE),
    Endpoint::new(
        "deleteRole",
        Verb::Delete,
        "/roles/<*roleId>",
        handler!(delete_role),
    )
    .title("Delete a role")
    .scopes(Template::Scope("auth:delete-role:<roleId>"))
    .success(Success::NoContent)
    .needs(WRITE),
    Endpoint::new(
        "expandScopes",
        Verb::Post,
        "/scopes/expand",
        handler!(expand_scopes),
    )
    .title("Scopes with every role expanded")
    .input("scopeset")
    .output("scopeset")
    .needs(READ),
    Endpoint::new(
        "currentScopes",
        Verb::Get,
        "/scopes/current",
        handler!(current_scopes),
    )
    .title("The caller's scopes")
    .output("scopeset")
    .needs(READ),
    Endpoint::new(
        "authenticateHawk",
        Verb::Post,
        "/authenticate-hawk",
        handler!(authenticate_hawk),
    )
    .title("Authenticate a request another service received")
    .input("authenticate-hawk-request")
    .output("authenticate-hawk-response")
    .needs(READ),
    Endpoint::new(
        "testAuthenticate",
        Verb::Post,
        "/test-authenticate",
        handler!(test_authenticate),
    )
    .title("Authenticate as upstream's test client, with the given scopes")
    .scopes(Template::For {
        var: "scope",
        in_: "requiredScopes",
        each: "<scope>",
    })
    .input("test-authenticate-request")
    .output("test-authenticate-response")
    .test_client(),
    Endpoint::new(
        "testAuthenticateGet",
        Verb::Get,
        "/test-authenticate-get/",
        handler!(test_authenticate),
    )
    .title("Authenticate as upstream's test client")
    .scopes(Template::Scope("test:authenticate-get"))
    .output("test-authenticate-response")
    .test_client(),
];

/// The auth service: `/api/auth/v1/`, one Lambda function (`auth`).
pub static AUTH: Service = Service {
    name: "auth",
    title: "Auth",
    prefix: "/api/auth/v1",
    groups: &[monitoring::ENDPOINTS, ENDPOINTS],
    functions: Functions::One { handler: "auth" },
    exchanges: None,
    serves_documents: true,
    authority: true,
};

fn id(call: &Call, name: &'static str) -> Params {
    Params::new().one(name, call.param(name))
}

/// The scopes being granted, for the `for scope in scopes` part of a template.
fn granting(call: &Call, name: &'static str) -> Params {
    id(call, name).many("scopes", string_list(&call.body["scopes"]))
}

async fn list_clients(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let prefix = call.query_arg("prefix");
    Reply::ok(api.auth.list_clients(prefix, &call.page()?).await?)
}

async fn client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    Reply::ok(api.auth.get_client(call.param("clientId")).await?)
}

async fn create_client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&granting(call, "clientId"))?;
    let cid = call.param("clientId").to_string();
    Reply::ok(api.auth.create_client(&cid, &call.body, call.now).await?)
}

/// `updateClient`: 404 for a missing client comes before the scope check, as upstream.
async fn update_client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let cid = call.param("clientId").to_string();
    let body = call.body.clone();
    let now = call.now;
    let client = api.auth.update_client_from(&cid, &body, now, |added| {
        call.authorize(&id(call, "clientId").many("scopesAdded", added))
    });
    Reply::ok(client.await?)
}

async fn reset_access_token(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&id(call, "clientId"))?;
    Reply::ok(
        api.auth
            .reset_access_token(call.param("clientId"), call.now)
            .await?,
    )
}

async fn enable_client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    set_disabled(api, call, false).await
}

async fn disable_client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    set_disabled(api, call, true).await
}

/// `enableClient` and `disableClient`.
async fn set_disabled(api: &Api, call: &mut Call, disable: bool) -> ApiResult<Reply> {
    call.authorize(&id(call, "clientId"))?;
    Reply::ok(
        api.auth
            .set_disabled(call.param("clientId"), disable, call.now)
            .await?,
    )
}

async fn delete_client(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&id(call, "clientId"))?;
    api.auth.delete_client(call.param("clientId")).await?;
    Reply::no_content()
}

async fn list_roles(api: &Api, _: &mut Call) -> ApiResult<Reply> {
    Reply::ok(api.auth.list_roles().await?)
}

async fn list_role_ids(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (roles, token) = api.auth.list_roles_page(&call.page()?).await?;
    let ids: Vec<&serde_json::Value> = roles.iter().map(|r| &r["roleId"]).collect();
    Reply::page(json!({ "roleIds": ids }), token)
}

async fn list_roles2(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let (roles, token) = api.auth.list_roles_page(&call.page()?).await?;
    Reply::page(json!({ "roles": roles }), token)
}

async fn role(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    Reply::ok(api.auth.get_role(call.param("roleId")).await?)
}

async fn create_role(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&granting(call, "roleId"))?;
    let rid = call.param("roleId").to_string();
    Reply::ok(api.auth.create_role(&rid, &call.body, call.now).await?)
}

/// `updateRole`: 404 for a missing role comes before the scope check, as upstream.
async fn update_role(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let rid = call.param("roleId").to_string();
    let body = call.body.clone();
    let now = call.now;
    let role = api.auth.update_role_from(&rid, &body, now, |added| {
        call.authorize(&id(call, "roleId").many("scopesAdded", added))
    });
    Reply::ok(role.await?)
}

async fn delete_role(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    call.authorize(&id(call, "roleId"))?;
    api.auth.delete_role(call.param("roleId")).await?;
    Reply::no_content()
}

async fn expand_scopes(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let scopes = api.auth.expand(&string_list(&call.body["scopes"])).await?;
    Reply::ok(json!({ "scopes": scopes }))
}

async fn current_scopes(_: &Api, call: &mut Call) -> ApiResult<Reply> {
    Reply::ok(json!({ "scopes": call.caller.scopes }))
}

/// Far enough ahead to mean "never" in an `expires` field.
fn never() -> Ts {
    Ts(32_503_680_000_000)
}

/// `authenticateHawk`: the verdict on a request another service received.
async fn authenticate_hawk(api: &Api, call: &mut Call) -> ApiResult<Reply> {
    let body = &call.body;
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
    let verdict = match api
        .auth
        .authenticate(&facts, call.now, &Realm::Deployment)
        .await?
    {
        Outcome::Failed(message) => json!({ "status": "auth-failed", "message": message }),
        // Without credentials, as upstream: good for 15 minutes.
        Outcome::Success(a) if a.client_id.is_none() => json!({
            "status": "no-auth", "scheme": "none", "scopes": a.scopes,
            "expires": call.now.plus(15 * crate::time::MINUTE),
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
    };
    Reply::ok(verdict)
}

/// `testAuthenticate` (the body names the scopes required) and `testAuthenticateGet`.
async fn test_authenticate(_: &Api, call: &mut Call) -> ApiResult<Reply> {
    let required = string_list(&call.body["requiredScopes"]);
    call.authorize(&Params::new().many("requiredScopes", required))?;
    // As upstream: the scopes as given merged with the anonymous role's (not expanded), and
    // a fixed clientId for an unsigned call.
    let anonymous = [format!("assume:{}", crate::auth::ANONYMOUS_ROLE)];
    let scopes = crate::scopes::merge_scope_sets(&call.caller.given, &anonymous);
    let client_id = call
        .caller
        .client_id
        .as_deref()
        .unwrap_or("auth-failed:no-auth");
    Reply::ok(json!({ "clientId": client_id, "scopes": scopes }))
}
