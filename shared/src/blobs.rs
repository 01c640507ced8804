//! The blob port: where artifact bytes live, reached only through URLs that the queue hands
//! out (workers PUT, readers GET; the queue never proxies bytes).
//!
//! - [`LocalBlobs`]: files under the data directory, behind expiring HMAC-signed URLs that the
//!   local server answers (see [`LocalBlobs::serve`]).
//! - `S3Blobs` (feature `aws`): presigned S3 URLs, DeleteObjects for expiry.

use crate::time::Ts;
use async_trait::async_trait;
use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Which bucket an object lives in: `public/…` artifacts go to the public one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// Readable without a signature (or through a CDN).
    Public,
    /// Readable only through presigned URLs.
    Private,
}

impl Bucket {
    /// The bucket for an artifact name.
    pub fn for_name(name: &str) -> Bucket {
        if name.starts_with("public/") {
            Bucket::Public
        } else {
            Bucket::Private
        }
    }
}

/// A blob-store failure (infrastructure, never the caller's fault).
#[derive(Debug, thiserror::Error)]
#[error("blob store: {0}")]
pub struct BlobError(pub String);

/// The blob port.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// The physical bucket name recorded in artifact rows.
    fn bucket_name(&self, bucket: Bucket) -> String;
    /// A URL that accepts one PUT of `key` with exactly this Content-Type until `now + ttl_ms`.
    async fn put_url(
        &self,
        bucket: Bucket,
        key: &str,
        content_type: &str,
        now: Ts,
        ttl_ms: i64,
    ) -> Result<String, BlobError>;
    /// A URL to GET `key`: presigned until `now + ttl_ms` for the private bucket; the plain
    /// (or CDN) URL for the public one.
    async fn get_url(
        &self,
        bucket: Bucket,
        key: &str,
        now: Ts,
        ttl_ms: i64,
    ) -> Result<String, BlobError>;
    /// Deletes objects (missing ones are not an error), in batches the backend accepts.
    async fn delete(&self, bucket: Bucket, keys: &[String]) -> Result<(), BlobError>;
    /// Stores `bytes` at `key` at once (PutObject), for data small enough to arrive inline.
    async fn put(
        &self,
        bucket: Bucket,
        key: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<(), BlobError>;
    /// The length and hashes of the bytes at `key`, read through once; `None` if there is no
    /// object (GetObject, hashed as it streams).
    async fn digest(&self, bucket: Bucket, key: &str) -> Result<Option<BlobDigest>, BlobError>;
}

/// The length and hashes of an object's bytes, as the object service records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobDigest {
    /// Bytes.
    pub len: u64,
    /// SHA-256, lowercase hex.
    pub sha256: String,
    /// SHA-512, lowercase hex.
    pub sha512: String,
}

/// Hashes bytes as they arrive, into a [`BlobDigest`].
#[derive(Default)]
pub struct Digester {
    len: u64,
    sha256: Sha256,
    sha512: sha2::Sha512,
}

impl Digester {
    /// Adds the next bytes.
    pub fn update(&mut self, chunk: &[u8]) {
        self.len += chunk.len() as u64;
        self.sha256.update(chunk);
        self.sha512.update(chunk);
    }

    /// The digest of everything added.
    pub fn finish(self) -> BlobDigest {
        BlobDigest {
            len: self.len,
            sha256: hex(&self.sha256.finalize()),
            sha512: hex(&self.sha512.finalize()),
        }
    }
}

/// Characters kept as they are in a key placed in a URL path (`/` separates segments).
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Characters kept as they are when `/` must be encoded too.
const KEY_ENCODE_SLASHES: &AsciiSet = &KEY_ENCODE.add(b'/');

/// A key as a URL path (each byte outside the unreserved set and `/` percent-encoded). A key
/// with a `.` or `..` segment has its `/` encoded too: clients resolve dot segments (even
/// percent-encoded ones) before they send a path, which would change the key.
pub fn encode_key(key: &str) -> String {
    let dot_segment = key.split('/').any(|seg| seg == "." || seg == "..");
    let set = if dot_segment {
        KEY_ENCODE_SLASHES
    } else {
        KEY_ENCODE
    };
    utf8_percent_encode(key, set).to_string()
}

/// A stand-in for deployments without artifact storage: every call fails.
pub struct NoBlobs;

#[async_trait]
impl BlobStore for NoBlobs {
    fn bucket_name(&self, _: Bucket) -> String {
        String::new()
    }
    async fn put_url(
        &self,
        _: Bucket,
        _: &str,
        _: &str,
        _: Ts,
        _: i64,
    ) -> Result<String, BlobError> {
        Err(BlobError("no artifact storage is configured".into()))
    }
    async fn get_url(&self, _: Bucket, _: &str, _: Ts, _: i64) -> Result<String, BlobError> {
        Err(BlobError("no artifact storage is configured".into()))
    }
    async fn delete(&self, _: Bucket, _: &[String]) -> Result<(), BlobError> {
        Err(BlobError("no artifact storage is configured".into()))
    }
    async fn put(&self, _: Bucket, _: &str, _: &str, _: Vec<u8>) -> Result<(), BlobError> {
        Err(BlobError("no artifact storage is configured".into()))
    }
    async fn digest(&self, _: Bucket, _: &str) -> Result<Option<BlobDigest>, BlobError> {
        Err(BlobError("no artifact storage is configured".into()))
    }
}

/// Path prefix under which the local server answers blob URLs.
pub const LOCAL_PREFIX: &str = "/__blobs/";

/// Headers of a PUT that S3 keeps with the object and sends back on GET and HEAD (besides
/// Content-Type): workers upload gzipped logs with `Content-Encoding: gzip`, and clients
/// decode them on download only if the header comes back.
pub const STORED_HEADERS: [&str; 4] = [
    "content-encoding",
    "content-disposition",
    "cache-control",
    "content-language",
];

/// Blobs as files under a directory, served by the local server at [`LOCAL_PREFIX`].
pub struct LocalBlobs {
    dir: PathBuf,
    base_url: String,
    key: Vec<u8>,
}

/// What the local server sends back for a blob request.
#[derive(Debug)]
pub struct BlobResponse {
    /// HTTP status.
    pub status: u16,
    /// Content-Type of the body.
    pub content_type: String,
    /// Further headers: those of [`STORED_HEADERS`] the object was stored with, and on HEAD
    /// the object's Content-Length.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl BlobResponse {
    fn text(status: u16, msg: &str) -> Self {
        BlobResponse {
            status,
            content_type: "text/plain; charset=utf-8".into(),
            headers: vec![],
            body: msg.as_bytes().to_vec(),
        }
    }
}

fn bucket_dir(b: Bucket) -> &'static str {
    match b {
        Bucket::Public => "public",
        Bucket::Private => "private",
    }
}

impl LocalBlobs {
    /// Blobs under `dir`, reached at `base_url` (the server's rootUrl); URLs are signed with a
    /// key derived from `secret` (the queue's own accessToken: nothing else to keep safe).
    pub fn new(dir: PathBuf, base_url: impl Into<String>, secret: &str) -> Self {
        LocalBlobs {
            dir,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            key: crate::mac::digest(secret.as_bytes(), b"tc-queue local blob URLs v1"),
        }
    }

    fn mac(&self, method: &str, bucket: &str, key: &str, exp: i64, ct: &str) -> Hmac<Sha256> {
        // Newline-separated: none of the fields can contain one (keys are printable ASCII).
        let text = format!("{method}\n{bucket}\n{key}\n{exp}\n{ct}");
        crate::mac::keyed(&self.key, text.as_bytes())
    }

    fn sign(&self, method: &str, bucket: &str, key: &str, exp: i64, ct: &str) -> String {
        hex(&self
            .mac(method, bucket, key, exp, ct)
            .finalize()
            .into_bytes())
    }

    /// File of an object: named by the key's hash, so no key can reach outside `dir`.
    fn path(&self, bucket: &str, key: &str) -> PathBuf {
        self.dir
            .join(bucket)
            .join(hex(&Sha256::digest(key.as_bytes())))
    }

    fn url(&self, bucket: &str, key: &str) -> String {
        format!(
            "{}{LOCAL_PREFIX}{bucket}/{}",
            self.base_url,
            encode_key(key)
        )
    }

    /// Answers a request for a blob URL. `path` is the raw path (with [`LOCAL_PREFIX`]),
    /// `content_type` the request's header, `stored` its headers of [`STORED_HEADERS`] (kept
    /// by a PUT); `now` decides expiry.
    #[allow(clippy::too_many_arguments)]
    pub async fn serve(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        stored: &[(&str, &str)],
        body: &[u8],
        now: Ts,
    ) -> BlobResponse {
        let Some(rest) = path.strip_prefix(LOCAL_PREFIX) else {
            return BlobResponse::text(404, "not found");
        };
        let Some((bucket, raw_key)) = rest.split_once('/') else {
            return BlobResponse::text(404, "not found");
        };
        if bucket != "public" && bucket != "private" {
            return BlobResponse::text(404, "no such bucket");
        }
        let Ok(key) = percent_encoding::percent_decode_str(raw_key).decode_utf8() else {
            return BlobResponse::text(400, "bad key");
        };
        let mut exp = None;
        let mut sig = None;
        for pair in query.unwrap_or_default().split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "X-Expires" => exp = v.parse::<i64>().ok(),
                "X-Signature" => sig = Some(v.to_string()),
                _ => {}
            }
        }
        let method_ok = method == "PUT" || method == "GET" || method == "HEAD";
        if !method_ok {
            return BlobResponse::text(405, "method not allowed");
        }
        let signed_method = if method == "HEAD" { "GET" } else { method };
        let public_read = bucket == "public" && signed_method == "GET";
        if !public_read {
            // The Content-Type is part of what a PUT URL signs; S3 refuses a mismatch the same way.
            let ct = if method == "PUT" {
                content_type.unwrap_or_default()
            } else {
                ""
            };
            let (Some(exp), Some(sig)) = (exp, sig) else {
                return BlobResponse::text(403, "missing signature");
            };
            let Some(sig) = unhex(&sig) else {
                return BlobResponse::text(403, "signature does not match");
            };
            // verify_slice compares in constant time.
            if self
                .mac(signed_method, bucket, &key, exp, ct)
                .verify_slice(&sig)
                .is_err()
            {
                return BlobResponse::text(403, "signature does not match");
            }
            if exp <= now.millis() {
                return BlobResponse::text(403, "request has expired");
            }
        }
        let file = self.path(bucket, &key);
        if method == "PUT" {
            let ct = content_type.unwrap_or("application/octet-stream");
            return match store_file(&file, ct, stored, body).await {
                Ok(()) => BlobResponse::text(200, ""),
                Err(e) => BlobResponse::text(500, &format!("write failed: {e}")),
            };
        }
        match tokio::fs::read(&file).await {
            Ok(bytes) => {
                let meta = read_meta(&file).await;
                let content_type = meta
                    .get("content-type")
                    .cloned()
                    .unwrap_or_else(|| "application/octet-stream".into());
                let mut headers: Vec<(String, String)> = STORED_HEADERS
                    .iter()
                    .filter_map(|h| meta.get(*h).map(|v| (h.to_string(), v.clone())))
                    .collect();
                if method == "HEAD" {
                    headers.push(("content-length".into(), bytes.len().to_string()));
                }
                BlobResponse {
                    status: 200,
                    content_type,
                    headers,
                    body: if method == "HEAD" { vec![] } else { bytes },
                }
            }
            Err(_) => BlobResponse::text(404, "no such key"),
        }
    }
}

/// Writes an object and the headers it is stored with, then renames it into place, so that a
/// reader never sees half an object.
async fn store_file(
    file: &std::path::Path,
    content_type: &str,
    stored: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    if let Some(parent) = file.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let tmp = file.with_extension(format!("tmp{}", crate::ids::new_slugid()));
    tokio::fs::write(&tmp, body).await?;
    let mut meta = serde_json::Map::new();
    meta.insert("content-type".into(), content_type.into());
    for (k, v) in stored {
        let k = k.to_ascii_lowercase();
        if STORED_HEADERS.contains(&k.as_str()) {
            meta.insert(k, (*v).into());
        }
    }
    tokio::fs::write(file.with_extension("meta"), serde_json::to_vec(&meta)?).await?;
    tokio::fs::rename(&tmp, file).await
}

/// The headers an object was stored with: its `.meta` file, or the Content-Type alone of an
/// object stored before headers were kept (`.ct`).
async fn read_meta(file: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    if let Ok(bytes) = tokio::fs::read(file.with_extension("meta")).await {
        if let Ok(m) = crate::json::from_bytes(&bytes) {
            return m;
        }
    }
    match tokio::fs::read_to_string(file.with_extension("ct")).await {
        Ok(ct) => [("content-type".to_string(), ct)].into(),
        Err(_) => Default::default(),
    }
}

#[async_trait]
impl BlobStore for LocalBlobs {
    fn bucket_name(&self, bucket: Bucket) -> String {
        bucket_dir(bucket).to_string()
    }

    async fn put_url(
        &self,
        bucket: Bucket,
        key: &str,
        content_type: &str,
        now: Ts,
        ttl_ms: i64,
    ) -> Result<String, BlobError> {
        let b = bucket_dir(bucket);
        let exp = now.plus(ttl_ms).millis();
        let sig = self.sign("PUT", b, key, exp, content_type);
        Ok(format!(
            "{}?X-Expires={exp}&X-Signature={sig}",
            self.url(b, key)
        ))
    }

    async fn get_url(
        &self,
        bucket: Bucket,
        key: &str,
        now: Ts,
        ttl_ms: i64,
    ) -> Result<String, BlobError> {
        let b = bucket_dir(bucket);
        if bucket == Bucket::Public {
            return Ok(self.url(b, key));
        }
        let exp = now.plus(ttl_ms).millis();
        let sig = self.sign("GET", b, key, exp, "");
        Ok(format!(
            "{}?X-Expires={exp}&X-Signature={sig}",
            self.url(b, key)
        ))
    }

    async fn delete(&self, bucket: Bucket, keys: &[String]) -> Result<(), BlobError> {
        for key in keys {
            let file = self.path(bucket_dir(bucket), key);
            for f in [
                file.clone(),
                file.with_extension("meta"),
                file.with_extension("ct"),
            ] {
                match tokio::fs::remove_file(&f).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(BlobError(e.to_string())),
                }
            }
        }
        Ok(())
    }

    async fn put(
        &self,
        bucket: Bucket,
        key: &str,
        content_type: &str,
        bytes: Vec<u8>,
    ) -> Result<(), BlobError> {
        let file = self.path(bucket_dir(bucket), key);
        store_file(&file, content_type, &[], &bytes)
            .await
            .map_err(|e| BlobError(e.to_string()))
    }

    async fn digest(&self, bucket: Bucket, key: &str) -> Result<Option<BlobDigest>, BlobError> {
        use tokio::io::AsyncReadExt;
        let file = self.path(bucket_dir(bucket), key);
        let mut f = match tokio::fs::File::open(&file).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(BlobError(e.to_string())),
        };
        let mut d = Digester::default();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = f
                .read(&mut buf)
                .await
                .map_err(|e| BlobError(e.to_string()))?;
            if n == 0 {
                return Ok(Some(d.finish()));
            }
            d.update(&buf[..n]);
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(feature = "aws")]
pub use s3::{S3Blobs, UrlSigner, SIGNER_SESSION};

#[cfg(feature = "aws")]
mod s3 {
    use super::*;
    use aws_sdk_s3::presigning::PresigningConfig;
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    use std::time::{Duration, UNIX_EPOCH};

    /// DeleteObjects accepts at most this many keys per call.
    const DELETE_BATCH: usize = 1000;

    /// How long a URL signer's sessions last: the most a role assumed from another role's
    /// session (a function's) may have, and longer than any URL the queue hands out (45
    /// minutes and 10 s, an upload's).
    pub const SIGNER_SESSION: Duration = Duration::from_secs(3600);

    /// A signing session must outlast the URL it signs by this much (clocks, the request).
    const SIGNER_MARGIN_MS: i64 = 60_000;

    /// Signs presigned URLs with sessions of a role of their own rather than with the
    /// process's credentials. A URL signed with temporary credentials stops working when they
    /// expire, whatever its `X-Amz-Expires` says, and a Lambda function's own credentials
    /// expire when AWS rotates them, which the function is not told. A session is used while
    /// it outlasts the URL being signed, then replaced (about every 13 minutes with
    /// [`SIGNER_SESSION`]).
    pub struct UrlSigner {
        role: String,
        provider: aws_sdk_s3::config::SharedCredentialsProvider,
        /// The session's end (ms since the epoch) and a client signing with it.
        held: tokio::sync::Mutex<Option<(i64, aws_sdk_s3::Client)>>,
    }

    impl UrlSigner {
        /// Sessions of `role_arn` lasting `session`, assumed with `sdk`'s credentials.
        pub async fn assume(
            sdk: &aws_config::SdkConfig,
            role_arn: &str,
            session: Duration,
        ) -> UrlSigner {
            let provider = aws_config::sts::AssumeRoleProvider::builder(role_arn)
                .session_name("tcq-url-signer")
                .session_length(session)
                .configure(sdk)
                .build()
                .await;
            UrlSigner {
                role: role_arn.to_string(),
                provider: aws_sdk_s3::config::SharedCredentialsProvider::new(provider),
                held: tokio::sync::Mutex::new(None),
            }
        }
    }

    /// Artifact objects on S3, one client built once per process.
    pub struct S3Blobs {
        client: aws_sdk_s3::Client,
        /// The client's configuration, for clients signing with a [`UrlSigner`]'s sessions.
        conf: aws_sdk_s3::Config,
        signer: Option<UrlSigner>,
        public_bucket: String,
        private_bucket: String,
        /// Base of public URLs: a CDN if configured, else the bucket's own URL.
        public_base: String,
    }

    impl S3Blobs {
        /// A store over the two buckets. With an endpoint URL (LocalStack) addressing is
        /// path-style, since virtual-host names need public DNS; `cdn` replaces the public
        /// bucket's URL in downloads.
        pub fn new(
            sdk: &aws_config::SdkConfig,
            public_bucket: impl Into<String>,
            private_bucket: impl Into<String>,
            cdn: Option<String>,
        ) -> Self {
            let public_bucket = public_bucket.into();
            let endpoint = sdk
                .endpoint_url()
                .map(|e| e.trim_end_matches('/').to_string());
            let conf = aws_sdk_s3::config::Builder::from(sdk)
                .force_path_style(endpoint.is_some())
                .build();
            let region = sdk
                .region()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "us-east-1".into());
            let public_base = match (cdn, &endpoint) {
                (Some(c), _) => c.trim_end_matches('/').to_string(),
                (None, Some(e)) => format!("{e}/{public_bucket}"),
                (None, None) => format!("https://{public_bucket}.s3.{region}.amazonaws.com"),
            };
            S3Blobs {
                client: aws_sdk_s3::Client::from_conf(conf.clone()),
                conf,
                signer: None,
                public_bucket,
                private_bucket: private_bucket.into(),
                public_base,
            }
        }

        /// The same store signing its URLs with `signer`'s sessions.
        pub fn with_signer(mut self, signer: UrlSigner) -> Self {
            self.signer = Some(signer);
            self
        }

        /// The client to sign a URL valid from `now` for `ttl_ms` with: the store's own
        /// without a signer, else one holding a signer's session that ends after the URL.
        async fn signing(&self, now: Ts, ttl_ms: i64) -> Result<aws_sdk_s3::Client, BlobError> {
            use aws_sdk_s3::config::ProvideCredentials;
            let Some(signer) = &self.signer else {
                return Ok(self.client.clone());
            };
            let needed = now.0 + ttl_ms.max(1000) + SIGNER_MARGIN_MS;
            let mut held = signer.held.lock().await;
            if let Some((_, client)) = held.as_ref().filter(|(ends, _)| *ends >= needed) {
                return Ok(client.clone());
            }
            let creds = signer.provider.provide_credentials().await.map_err(|e| {
                BlobError(format!(
                    "assuming the URL signer role {}: {}",
                    signer.role,
                    aws_sdk_s3::error::DisplayErrorContext(&e)
                ))
            })?;
            let ends = creds
                .expiry()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(i64::MAX, |d| d.as_millis() as i64);
            let client = aws_sdk_s3::Client::from_conf(
                self.conf.to_builder().credentials_provider(creds).build(),
            );
            *held = Some((ends, client.clone()));
            if ends < needed {
                return Err(BlobError(format!(
                    "the URL signer role {}'s session ends {} s before a URL of {} s would: \
                     its sessions must outlast the longest URL",
                    signer.role,
                    (needed - ends) / 1000,
                    ttl_ms / 1000
                )));
            }
            Ok(client)
        }

        /// Creates both buckets if they are missing (LocalStack and tests).
        pub async fn create_buckets(&self) -> Result<(), BlobError> {
            for b in [&self.public_bucket, &self.private_bucket] {
                if let Err(e) = self.client.create_bucket().bucket(b).send().await {
                    let owned = e.as_service_error().is_some_and(|s| {
                        s.is_bucket_already_owned_by_you() || s.is_bucket_already_exists()
                    });
                    if !owned {
                        return Err(BlobError(format!("create bucket {b}: {e:?}")));
                    }
                }
            }
            Ok(())
        }

        fn name(&self, bucket: Bucket) -> &str {
            match bucket {
                Bucket::Public => &self.public_bucket,
                Bucket::Private => &self.private_bucket,
            }
        }
    }

    fn presigning(now: Ts, ttl_ms: i64) -> Result<PresigningConfig, BlobError> {
        let start = UNIX_EPOCH + Duration::from_millis(now.millis().max(0) as u64);
        PresigningConfig::builder()
            .start_time(start)
            .expires_in(Duration::from_millis(ttl_ms.max(1000) as u64))
            .build()
            .map_err(|e| BlobError(e.to_string()))
    }

    #[async_trait]
    impl BlobStore for S3Blobs {
        fn bucket_name(&self, bucket: Bucket) -> String {
            self.name(bucket).to_string()
        }

        async fn put_url(
            &self,
            bucket: Bucket,
            key: &str,
            content_type: &str,
            now: Ts,
            ttl_ms: i64,
        ) -> Result<String, BlobError> {
            let req = self
                .signing(now, ttl_ms)
                .await?
                .put_object()
                .bucket(self.name(bucket))
                .key(key)
                .content_type(content_type)
                .presigned(presigning(now, ttl_ms)?)
                .await
                .map_err(|e| BlobError(format!("{e:?}")))?;
            Ok(req.uri().to_string())
        }

        async fn get_url(
            &self,
            bucket: Bucket,
            key: &str,
            now: Ts,
            ttl_ms: i64,
        ) -> Result<String, BlobError> {
            if bucket == Bucket::Public {
                return Ok(format!("{}/{}", self.public_base, encode_key(key)));
            }
            let req = self
                .signing(now, ttl_ms)
                .await?
                .get_object()
                .bucket(self.name(bucket))
                .key(key)
                .presigned(presigning(now, ttl_ms)?)
                .await
                .map_err(|e| BlobError(format!("{e:?}")))?;
            Ok(req.uri().to_string())
        }

        async fn delete(&self, bucket: Bucket, keys: &[String]) -> Result<(), BlobError> {
            for chunk in keys.chunks(DELETE_BATCH) {
                let ids = chunk
                    .iter()
                    .map(|k| ObjectIdentifier::builder().key(k).build())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| BlobError(e.to_string()))?;
                let del = Delete::builder()
                    .set_objects(Some(ids))
                    .quiet(true)
                    .build()
                    .map_err(|e| BlobError(e.to_string()))?;
                let out = self
                    .client
                    .delete_objects()
                    .bucket(self.name(bucket))
                    .delete(del)
                    .send()
                    .await
                    .map_err(|e| BlobError(format!("{e:?}")))?;
                if let Some(err) = out.errors().first() {
                    return Err(BlobError(format!(
                        "DeleteObjects failed for {:?}: {:?}",
                        err.key(),
                        err.message()
                    )));
                }
            }
            Ok(())
        }

        async fn put(
            &self,
            bucket: Bucket,
            key: &str,
            content_type: &str,
            bytes: Vec<u8>,
        ) -> Result<(), BlobError> {
            self.client
                .put_object()
                .bucket(self.name(bucket))
                .key(key)
                .content_type(content_type)
                .body(bytes.into())
                .send()
                .await
                .map_err(|e| BlobError(format!("{e:?}")))?;
            Ok(())
        }

        async fn digest(&self, bucket: Bucket, key: &str) -> Result<Option<BlobDigest>, BlobError> {
            let got = self
                .client
                .get_object()
                .bucket(self.name(bucket))
                .key(key)
                .send()
                .await;
            let mut body = match got {
                Ok(o) => o.body,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                    return Ok(None)
                }
                Err(e) => return Err(BlobError(format!("{e:?}"))),
            };
            let mut d = Digester::default();
            while let Some(chunk) = body
                .try_next()
                .await
                .map_err(|e| BlobError(e.to_string()))?
            {
                d.update(&chunk);
            }
            Ok(Some(d.finish()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(url: &str) -> (String, String) {
        let rest = url.split_once("127.0.0.1").map(|x| x.1).unwrap_or_default();
        let (p, q) = rest.split_once('?').unwrap_or((rest, ""));
        (p.to_string(), q.to_string())
    }

    #[tokio::test]
    async fn signed_put_then_get_round_trips_and_binds_content_type_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBlobs::new(dir.path().to_path_buf(), "http://127.0.0.1", "secret");
        let now = Ts(1_000_000);
        let key = "t/0/private/a b?c#d.txt";
        let put = b
            .put_url(Bucket::Private, key, "text/plain", now, 60_000)
            .await
            .unwrap();
        let (p, q) = parts(&put);
        let wrong_ct = b
            .serve("PUT", &p, Some(&q), Some("text/html"), &[], b"x", now)
            .await;
        assert_eq!(wrong_ct.status, 403);
        let late = b
            .serve(
                "PUT",
                &p,
                Some(&q),
                Some("text/plain"),
                &[],
                b"x",
                now.plus(60_000),
            )
            .await;
        assert_eq!(late.status, 403);
        let tampered = q.replace("X-Expires=", "X-Expires=9");
        let t = b
            .serve(
                "PUT",
                &p,
                Some(&tampered),
                Some("text/plain"),
                &[],
                b"x",
                now,
            )
            .await;
        assert_eq!(t.status, 403);
        let ok = b
            .serve("PUT", &p, Some(&q), Some("text/plain"), &[], b"hello", now)
            .await;
        assert_eq!(ok.status, 200);
        let get = b.get_url(Bucket::Private, key, now, 1000).await.unwrap();
        let (gp, gq) = parts(&get);
        let got = b.serve("GET", &gp, Some(&gq), None, &[], b"", now).await;
        assert_eq!((got.status, got.body.as_slice()), (200, &b"hello"[..]));
        assert_eq!(got.content_type, "text/plain");
        // A private object is not readable without a signature.
        assert_eq!(
            b.serve("GET", &gp, None, None, &[], b"", now).await.status,
            403
        );
        b.delete(Bucket::Private, &[key.to_string()]).await.unwrap();
        assert_eq!(
            b.serve("GET", &gp, Some(&gq), None, &[], b"", now)
                .await
                .status,
            404
        );
        // Nothing of it is left on disk (the object and the headers it was stored with).
        let left = std::fs::read_dir(dir.path().join("private"))
            .unwrap()
            .count();
        assert_eq!(left, 0);
    }

    #[test]
    fn keys_with_dot_segments_keep_their_slashes_encoded() {
        assert_eq!(encode_key("t/0/a b.txt"), "t/0/a%20b.txt");
        assert_eq!(encode_key("a..b/c"), "a..b/c");
        assert_eq!(encode_key("a/../b"), "a%2F..%2Fb");
        assert_eq!(encode_key("./x"), ".%2Fx");
    }

    #[tokio::test]
    async fn public_objects_are_readable_without_a_signature() {
        let dir = tempfile::tempdir().unwrap();
        let b = LocalBlobs::new(dir.path().to_path_buf(), "http://127.0.0.1", "secret");
        let now = Ts(5);
        let put = b
            .put_url(Bucket::Public, "public/x", "a/b", now, 1000)
            .await
            .unwrap();
        let (p, q) = parts(&put);
        assert_eq!(
            b.serve("PUT", &p, Some(&q), Some("a/b"), &[], b"1", now)
                .await
                .status,
            200
        );
        let get = b
            .get_url(Bucket::Public, "public/x", now, 1000)
            .await
            .unwrap();
        assert!(!get.contains("X-Signature"));
        let (gp, _) = parts(&get);
        assert_eq!(
            b.serve("GET", &gp, None, None, &[], b"", now).await.body,
            b"1"
        );
    }
}
