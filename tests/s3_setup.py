#!/usr/bin/env python3
"""s3_setup.py - what the S3 tests (tests/cli_s3*.sh) do to a loopback moto server, with boto3.

  s3_setup.py ENDPOINT user KEYFILE     an IAM user allowed s3:*, and its access key: writes
                                        "KEY_ID SECRET" to KEYFILE
  s3_setup.py ENDPOINT upload BUCKET PREFIX DIR [AFFIX]
                                        creates BUCKET (if need be) and puts every file of DIR
                                        under PREFIX/; with AFFIX (Python escapes: \r, \u00e9),
                                        each *.safetensors file's key is PREFIX/AFFIX+NAME
  s3_setup.py ENDPOINT put BUCKET KEY FILE
                                        puts one object (a replacement gets a new ETag)
  s3_setup.py ENDPOINT upload-sha256 BUCKET PREFIX DIR
                                        as upload, each object in one PUT with ChecksumAlgorithm
                                        SHA256: the store keeps its SHA-256 (x-amz-checksum-sha256)
  s3_setup.py ENDPOINT put-multipart BUCKET KEY FILE
                                        one object in 5 MiB parts with ChecksumAlgorithm SHA256:
                                        its checksum is COMPOSITE (of the parts), not the file's
  s3_setup.py ENDPOINT role KEYFILE     a role allowed s3:*, assumed: writes "KEY_ID SECRET TOKEN"
                                        of the temporary credentials to KEYFILE
  s3_setup.py ENDPOINT auth N           from now on every request past the next N is
                                        authenticated: the access key must exist and the SigV4
                                        signature must match (moto's INITIAL_NO_AUTH_ACTION_COUNT)
Requests before `auth` are unauthenticated, so that set-up needs no key; the server must be
started with INITIAL_NO_AUTH_ACTION_COUNT set (to a large number). After it, S3_SETUP_KEY and
S3_SETUP_SECRET in the environment give the key to sign with (the one `user` wrote).
"""
import codecs
import json
import os
import sys
import urllib.request

import boto3


def client(endpoint, service):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=os.environ.get("S3_SETUP_KEY", "AKIASETUPSETUPSETUP0"),
                        aws_secret_access_key=os.environ.get("S3_SETUP_SECRET", "setup"))


def main():
    endpoint, cmd, *args = sys.argv[1:]
    if cmd == "user":
        iam = client(endpoint, "iam")
        iam.create_user(UserName="loader")
        iam.put_user_policy(UserName="loader", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        k = iam.create_access_key(UserName="loader")["AccessKey"]
        with open(args[0], "w") as f:
            f.write("%s %s\n" % (k["AccessKeyId"], k["SecretAccessKey"]))
    elif cmd == "role":
        iam = client(endpoint, "iam")
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                         "Principal": {"AWS": "*"}}]}
        arn = iam.create_role(RoleName="reader", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        iam.put_role_policy(RoleName="reader", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        c = client(endpoint, "sts").assume_role(RoleArn=arn, RoleSessionName="load")["Credentials"]
        with open(args[0], "w") as f:
            f.write("%s %s %s\n" % (c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"]))
    elif cmd == "upload":
        bucket, prefix, folder = args[:3]
        affix = codecs.decode(args[3], "unicode_escape") if len(args) > 3 else ""
        s3 = client(endpoint, "s3")
        if bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
            s3.create_bucket(Bucket=bucket)
        for name in sorted(os.listdir(folder)):
            key = (affix + name) if name.endswith(".safetensors") else name
            s3.upload_file(os.path.join(folder, name), bucket, prefix.rstrip("/") + "/" + key)
    elif cmd in ("upload-sha256", "put-multipart"):
        from boto3.s3.transfer import TransferConfig
        mib = 1 << 20
        one = TransferConfig(multipart_threshold=1 << 40)   # a single PUT whatever the size
        parts = TransferConfig(multipart_threshold=5 * mib, multipart_chunksize=5 * mib)
        s3 = client(endpoint, "s3")
        sha = {"ChecksumAlgorithm": "SHA256"}
        if cmd == "put-multipart":
            bucket, key, path = args
            s3.upload_file(path, bucket, key, ExtraArgs=sha, Config=parts)
            return
        bucket, prefix, folder = args
        if bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
            s3.create_bucket(Bucket=bucket)
        for name in sorted(os.listdir(folder)):
            s3.upload_file(os.path.join(folder, name), bucket, prefix.rstrip("/") + "/" + name,
                           ExtraArgs=sha, Config=one)
    elif cmd == "put":
        bucket, key, path = args
        client(endpoint, "s3").upload_file(path, bucket, key)
    elif cmd == "auth":
        req = urllib.request.Request(endpoint + "/moto-api/reset-auth", data=args[0].encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(req).read()
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
