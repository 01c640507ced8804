//! The template's tables, buckets, queues and secrets, created on LocalStack as CloudFormation
//! would (an existing one is kept, so a restarted shape finds its data), and their physical
//! names recorded for the functions' variables and events.

use super::template::{Error, Template, ACCOUNT, REGION};
use crate::runtime_api::localstack_json;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn ddb(target: &str, body: Value) -> impl std::future::Future<Output = Result<Value, String>> {
    let target = format!("DynamoDB_20120810.{target}");
    async move { localstack_json("dynamodb", "1.0", &target, body).await }
}

/// The physical name CloudFormation would derive for a resource without one.
fn generated_name(stack: &str, id: &str) -> String {
    let mut out = format!("{stack}-");
    for (i, c) in id.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

async fn create_table(t: &mut Template, id: &str, props: &Value) -> Result<(), Error> {
    let p = t.resolve(props)?;
    let name = p["TableName"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| generated_name(&t.stack, id));
    let mut req = json!({
        "TableName": name,
        "AttributeDefinitions": p["AttributeDefinitions"],
        "KeySchema": p["KeySchema"],
        "BillingMode": p.get("BillingMode").cloned().unwrap_or(json!("PAY_PER_REQUEST")),
    });
    for k in ["GlobalSecondaryIndexes", "ProvisionedThroughput"] {
        if let Some(v) = p.get(k) {
            req[k] = v.clone();
        }
    }
    // CloudFormation's StreamSpecification is the view type alone; the API's also says on.
    if let Some(view) = p["StreamSpecification"]["StreamViewType"].as_str() {
        req["StreamSpecification"] = json!({ "StreamEnabled": true, "StreamViewType": view });
    }
    match ddb("CreateTable", req).await {
        Ok(_) => {}
        Err(e) if e.contains("ResourceInUseException") => {}
        Err(e) => return Err(format!("CreateTable {name}: {e}").into()),
    }
    let until = Instant::now() + Duration::from_secs(60);
    let described = loop {
        let d = ddb("DescribeTable", json!({ "TableName": name })).await?;
        if d["Table"]["TableStatus"] == "ACTIVE" {
            break d;
        }
        if Instant::now() > until {
            return Err(format!("table {name} did not become active").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if let Some(ttl) = p.get("TimeToLiveSpecification") {
        let _ = ddb(
            "UpdateTimeToLive",
            json!({ "TableName": name, "TimeToLiveSpecification": ttl }),
        )
        .await;
    }
    let arn = described["Table"]["TableArn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut attrs = vec![("Arn", arn)];
    if let Some(s) = described["Table"]["LatestStreamArn"].as_str() {
        attrs.push(("StreamArn", s.to_string()));
    }
    t.set_physical(id, &name, &attrs);
    Ok(())
}

async fn create_queue(t: &mut Template, id: &str, props: &Value) -> Result<(), Error> {
    let p = t.resolve(props)?;
    let name = p["QueueName"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| generated_name(&t.stack, id));
    let out = localstack_json(
        "sqs",
        "1.0",
        "AmazonSQS.CreateQueue",
        json!({ "QueueName": name }),
    )
    .await?;
    let url = out["QueueUrl"].as_str().unwrap_or_default().to_string();
    let arn = format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}");
    t.set_physical(
        id,
        &url,
        &[("Arn", arn), ("QueueName", name), ("QueueUrl", url.clone())],
    );
    Ok(())
}

/// A secret CloudFormation would generate: the template's string with a random key added.
fn generated_secret(p: &Value) -> String {
    let g = &p["GenerateSecretString"];
    let len = g["PasswordLength"].as_u64().unwrap_or(32) as usize;
    let mut random = String::new();
    while random.len() < len {
        random.extend(crate::slugid().chars().filter(char::is_ascii_alphanumeric));
    }
    random.truncate(len);
    let mut v: Value = g["SecretStringTemplate"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| json!({}));
    match g["GenerateStringKey"].as_str() {
        Some(k) => {
            v[k] = json!(random);
            v.to_string()
        }
        None => random,
    }
}

async fn create_secret(t: &mut Template, id: &str, props: &Value) -> Result<(), Error> {
    let p = t.resolve(props)?;
    let name = p["Name"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| generated_name(&t.stack, id));
    let sm = |target: &str, body: Value| {
        let target = format!("secretsmanager.{target}");
        async move { localstack_json("secretsmanager", "1.1", &target, body).await }
    };
    let secret = p["SecretString"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| generated_secret(&p));
    let arn = match sm(
        "CreateSecret",
        // Secrets Manager wants an idempotency token of 32 characters or more.
        json!({ "Name": name, "SecretString": secret,
                "ClientRequestToken": format!("{}{}", crate::slugid(), crate::slugid()) }),
    )
    .await
    {
        Ok(out) => out["ARN"].as_str().unwrap_or_default().to_string(),
        Err(e) if e.contains("ResourceExistsException") => {
            let d = sm("DescribeSecret", json!({ "SecretId": name })).await?;
            d["ARN"].as_str().unwrap_or_default().to_string()
        }
        Err(e) => return Err(format!("CreateSecret {name}: {e}").into()),
    };
    t.set_physical(id, &arn, &[("Id", arn.clone())]);
    Ok(())
}

/// The secret string of the secret at `arn`.
pub async fn secret_value(arn: &str) -> Result<String, Error> {
    let out = localstack_json(
        "secretsmanager",
        "1.1",
        "secretsmanager.GetSecretValue",
        json!({ "SecretId": arn }),
    )
    .await?;
    Ok(out["SecretString"].as_str().unwrap_or_default().to_string())
}

/// Puts a new value in the secret at `arn`, as a rotation does: the new version becomes
/// `AWSCURRENT` and the one before `AWSPREVIOUS`.
pub async fn put_secret_value(arn: &str, value: &str) -> Result<(), Error> {
    localstack_json(
        "secretsmanager",
        "1.1",
        "secretsmanager.PutSecretValue",
        json!({ "SecretId": arn, "SecretString": value,
                "ClientRequestToken": format!("{}{}", crate::slugid(), crate::slugid()) }),
    )
    .await?;
    Ok(())
}

async fn create_bucket(t: &mut Template, id: &str, props: &Value) -> Result<(), Error> {
    let p = t.resolve(props)?;
    let name = p["BucketName"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| generated_name(&t.stack, id).to_ascii_lowercase());
    let sdk = shared::store::dynamodb::sdk_config().await?;
    let s3 = shared::blobs::S3Blobs::new(&sdk, name.clone(), name.clone(), None);
    s3.create_buckets().await?;
    t.set_physical(
        id,
        &name,
        &[
            ("Arn", format!("arn:aws:s3:::{name}")),
            ("DomainName", format!("{name}.s3.amazonaws.com")),
        ],
    );
    Ok(())
}

/// Creates every resource the functions need, and records the physical names of the others
/// that are not emulated (the HTTP API, the broker: the local RabbitMQ stands in for it).
pub async fn create_all(t: &mut Template) -> Result<(), Error> {
    for (id, p) in t.resources("AWS::DynamoDB::Table") {
        create_table(t, &id, &p).await?;
    }
    for (id, p) in t.resources("AWS::SQS::Queue") {
        create_queue(t, &id, &p).await?;
    }
    for (id, p) in t.resources("AWS::SecretsManager::Secret") {
        create_secret(t, &id, &p).await?;
    }
    for (id, p) in t.resources("AWS::S3::Bucket") {
        create_bucket(t, &id, &p).await?;
    }
    // IAM is not emulated: a role is its ARN, which LocalStack's STS assumes as it is.
    for (id, _) in t.resources("AWS::IAM::Role") {
        let arn = format!(
            "arn:aws:iam::000000000000:role/{}",
            generated_name(&t.stack, &id)
        );
        t.set_physical(&id, &arn, &[("Arn", arn.clone())]);
    }
    for (id, _) in t.resources("AWS::Serverless::HttpApi") {
        t.set_physical(&id, "local", &[]);
    }
    for (id, _) in t.resources("AWS::AmazonMQ::Broker") {
        let arn = format!("arn:aws:mq:{REGION}:{ACCOUNT}:broker:{}:local", t.stack);
        t.set_physical(&id, "local", &[("Arn", arn)]);
    }
    for (id, p) in t.resources("AWS::Logs::LogGroup") {
        let name = t.resolve(&p["LogGroupName"])?;
        t.set_physical(&id, name.as_str().unwrap_or_default(), &[]);
    }
    Ok(())
}

/// Deletes the stack's tables (and so their streams), queues and secrets, as deleting the
/// stack would; buckets stay (LocalStack keeps them at no cost). Errors are logged: what is
/// gone already is fine.
pub async fn delete_all(t: &Template) {
    let physical = |id: &str| {
        t.resolve(&json!({ "Ref": id }))
            .ok()
            .and_then(|v| v.as_str().map(String::from))
    };
    type Body = fn(String) -> Value;
    let kinds: [(&str, &str, &str, &str, Body); 3] = [
        (
            "AWS::DynamoDB::Table",
            "dynamodb",
            "1.0",
            "DynamoDB_20120810.DeleteTable",
            |n| json!({ "TableName": n }),
        ),
        (
            "AWS::SQS::Queue",
            "sqs",
            "1.0",
            "AmazonSQS.DeleteQueue",
            |u| json!({ "QueueUrl": u }),
        ),
        (
            "AWS::SecretsManager::Secret",
            "secretsmanager",
            "1.1",
            "secretsmanager.DeleteSecret",
            |a| json!({ "SecretId": a, "ForceDeleteWithoutRecovery": true }),
        ),
    ];
    let mut calls = vec![];
    for (kind, service, version, target, body) in kinds {
        for (id, _) in t.resources(kind) {
            if let Some(name) = physical(&id) {
                calls.push((service, version, target.to_string(), body(name)));
            }
        }
    }
    for (service, version, target, body) in calls {
        if let Err(e) = localstack_json(service, version, &target, body).await {
            if !e.contains("NotFound") && !e.contains("NonExistent") {
                tracing::warn!(target, error = %e, "could not delete a resource of the stack");
            }
        }
    }
}

/// Records a failed batch or invocation in an SQS queue (an on-failure destination).
pub async fn send_failure(queue: &str, record: &Value) {
    let url = format!("http://127.0.0.1:4566/queue/{REGION}/{ACCOUNT}/{queue}");
    let body = json!({ "QueueUrl": url, "MessageBody": record.to_string() });
    if let Err(e) = localstack_json("sqs", "1.0", "AmazonSQS.SendMessage", body).await {
        tracing::warn!(queue, error = %e, "could not record a failure");
    }
}
