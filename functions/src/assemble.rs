//! The services assembled from their ports: what the local server and the Lambda functions
//! both build at start.

use crate::config::QueueSettings;
use shared::api::Api;
use shared::auth::ROOT_CLIENT_ID;
use shared::auth::{AuthService, ClientRecord};
use shared::blobs::{BlobStore, S3Blobs, UrlSigner, SIGNER_SESSION};
use shared::creds::Issuer;
use shared::queue::Queue;
use shared::signal::{amqp::AmqpSignal, LocalSignal, WorkSignal};
use shared::store::dynamodb::{self, DynamoStore};
use shared::store::Store;
use shared::tokens::RotatingToken;
use std::sync::Arc;

/// A start-up failure, with what failed in its message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The work signal of a process: wake-ups through the broker at `amqp_url` when there is
/// one (they then reach claimWork calls waiting in other processes), else this process's
/// own. Starts a background task: call within a tokio runtime.
pub fn work_signal(amqp_url: Option<&str>, settings: &QueueSettings) -> Arc<dyn WorkSignal> {
    match amqp_url {
        Some(url) => Arc::new(AmqpSignal::start(url, &settings.exchange_prefix)),
        None => Arc::new(LocalSignal::default()),
    }
}

/// The auth service with the static clients: root (when configured) and the queue's own
/// (both `*`: the queue issues credentials for any task's scopes), each token read again
/// when rotated.
pub fn auth_service(
    store: Arc<dyn Store>,
    root: Option<&Arc<RotatingToken>>,
    queue: &Issuer,
    anonymous_scopes: Vec<String>,
) -> AuthService {
    let client =
        |id: &str, token: &RotatingToken| ClientRecord::static_client(id, &token.cached(), &["*"]);
    let mut statics = vec![client(&queue.client_id, &queue.token)];
    if let Some(r) = root {
        statics.push(client(ROOT_CLIENT_ID, r));
    }
    let mut auth = AuthService::new(store, statics, anonymous_scopes)
        .with_rotating(&queue.client_id, queue.token.clone());
    if let Some(r) = root {
        auth = auth.with_rotating(ROOT_CLIENT_ID, r.clone());
    }
    auth
}

/// The queue's and root's tokens (see [`static_token`]), each given directly or else named
/// by the settings' secret; both read at once, since they sit on a function's cold start.
pub async fn static_tokens(
    queue_direct: Option<&str>,
    root_direct: Option<&str>,
    settings: &QueueSettings,
) -> Result<(Option<Arc<RotatingToken>>, Option<Arc<RotatingToken>>), BoxError> {
    let (queue, root) = tokio::join!(
        static_token(
            queue_direct,
            settings.queue_access_token_secret.as_deref(),
            settings
        ),
        static_token(
            root_direct,
            settings.root_access_token_secret.as_deref(),
            settings
        ),
    );
    Ok((queue?, root?))
}

/// A static client's token: `direct` when given (fixed), else the one in the Secrets Manager
/// secret named `secret`, read again as the settings say, else none.
async fn static_token(
    direct: Option<&str>,
    secret: Option<&str>,
    settings: &QueueSettings,
) -> Result<Option<Arc<RotatingToken>>, BoxError> {
    if let Some(t) = direct {
        return Ok(Some(Arc::new(RotatingToken::fixed(t))));
    }
    let Some(name) = secret else { return Ok(None) };
    let sdk = dynamodb::sdk_config().await?;
    let source = Arc::new(shared::secrets::SecretToken::new(&sdk, name));
    let token =
        RotatingToken::read_from(source, settings.rotation(), shared::time::Ts::now()).await?;
    Ok(Some(Arc::new(token)))
}

/// DynamoDB under the settings' table prefix (tables created first with `create`).
pub async fn open_dynamodb(
    settings: &QueueSettings,
    create: bool,
) -> Result<DynamoStore, BoxError> {
    let sdk = dynamodb::sdk_config().await?;
    if create {
        let client = dynamodb::client(&sdk);
        dynamodb::create_tables(&client, &settings.table_prefix, false).await?;
    }
    Ok(DynamoStore::new(&sdk, settings.table_prefix.clone())?)
}

/// The S3 artifact buckets (created first with `create`).
pub async fn open_s3(settings: &QueueSettings, create: bool) -> Result<S3Blobs, BoxError> {
    let sdk = dynamodb::sdk_config().await?;
    let mut s3 = S3Blobs::new(
        &sdk,
        settings.bucket(true),
        settings.bucket(false),
        settings.public_artifact_cdn.clone(),
    );
    if let Some(role) = settings
        .url_signer_role_arn
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        s3 = s3.with_signer(UrlSigner::assume(&sdk, role, SIGNER_SESSION).await);
    }
    if create {
        s3.create_buckets().await?;
    }
    Ok(s3)
}

/// The three services over one queue.
pub fn api(
    queue: Arc<Queue>,
    auth: AuthService,
    blobs: Arc<dyn BlobStore>,
    settings: &QueueSettings,
) -> Api {
    let api = Api::new(queue, Arc::new(auth))
        .with_blobs(blobs)
        .with_scheduler_id(&settings.scheduler_id);
    match settings.auth_root_url.as_deref().filter(|u| !u.is_empty()) {
        Some(url) => api.with_delegated_auth(shared::auth::remote::RemoteAuth::new(url)),
        None => api,
    }
}
