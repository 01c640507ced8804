"""Creates the tables, indexes, streams, TTL, queues and buckets declared in
infra/resources.json, the declaration infra/template.yaml is generated from (tests/tests/infra.rs
checks both), so LocalStack holds what a deployed stack holds. Tables and queues are named
<prefix><name>, as the template names them <stack>-<name>. Idempotent: existing resources are
left as they are."""
import json
import sys

import boto3
from botocore.exceptions import ClientError


def main(path, prefix):
    spec = json.load(open(path))
    tables = spec.get("tables", []) + spec.get("test_tables", [])
    ddb = boto3.client("dynamodb")
    existing = set()
    for page in ddb.get_paginator("list_tables").paginate():
        existing.update(page["TableNames"])
    for t in tables:
        name = prefix + t["name"]
        if name not in existing:
            attrs = {a: "S" for a in [t["pk"], t["sk"]]}
            gsis = []
            for g in t.get("indexes", []):
                attrs[g["pk"]] = "S"
                attrs[g["sk"]] = "S"
                gsis.append({
                    "IndexName": g["name"],
                    "KeySchema": [{"AttributeName": g["pk"], "KeyType": "HASH"},
                                  {"AttributeName": g["sk"], "KeyType": "RANGE"}],
                    "Projection": {"ProjectionType": g.get("projection", "ALL")},
                })
            args = dict(
                TableName=name,
                AttributeDefinitions=[{"AttributeName": k, "AttributeType": v} for k, v in attrs.items()],
                KeySchema=[{"AttributeName": t["pk"], "KeyType": "HASH"},
                           {"AttributeName": t["sk"], "KeyType": "RANGE"}],
                BillingMode="PAY_PER_REQUEST",
            )
            if gsis:
                args["GlobalSecondaryIndexes"] = gsis
            if t.get("stream"):
                args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": t["stream"]}
            try:
                ddb.create_table(**args)
            except ClientError as e:
                if e.response["Error"]["Code"] != "ResourceInUseException":
                    raise
                continue
            ddb.get_waiter("table_exists").wait(TableName=name)
            if t.get("ttl"):
                ddb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": t["ttl"]})
            print(f"created table {name}")
    sqs = boto3.client("sqs")
    for q in spec.get("queues", []):
        sqs.create_queue(QueueName=prefix + q["name"])
        print(f"queue {prefix + q['name']}")
    s3 = boto3.client("s3")
    for b in spec.get("buckets", []):
        try:
            s3.create_bucket(Bucket=b["name"])
            print(f"created bucket {b['name']}")
        except ClientError as e:
            if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "tcq-")
