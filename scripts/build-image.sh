#!/usr/bin/env bash
# The claim service's container image (ClaimMode=service), built without a Docker daemon:
# an OCI image archive with one layer, the `tc-queue` binary at /tc-queue (its entry point),
# the CA certificates it trusts for TLS, and, for a dynamically linked binary of this
# machine's architecture, the libraries it loads. Reproducible: the same binary gives the
# same digests.
#
# Usage: bash scripts/build-image.sh [--arch arm64|amd64] [--binary PATH] [--out FILE]
#   --arch    the image's architecture (default arm64, as the template's task definition)
#   --binary  a built tc-queue; default: built here, for arm64 statically with
#             `cargo lambda build --release --target aarch64-unknown-linux-musl --bin tc-queue`
#             (cargo-lambda brings the cross linker), for amd64 with `cargo build --release`
#   --out     the archive (default target/image/tc-queue-<arch>.tar)
# Push it with any registry client that needs no daemon, for example:
#   skopeo copy oci-archive:target/image/tc-queue-arm64.tar \
#     docker://<account>.dkr.ecr.<region>.amazonaws.com/tc-queue:<tag>
# then deploy with ClaimMode=service ClaimServiceImage=<that image>.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=arm64 binary= out=
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
case "$arch" in
  arm64|amd64) ;;
  *) echo "build-image.sh: --arch is arm64 or amd64, not $arch" >&2; exit 2 ;;
esac
out="${out:-target/image/tc-queue-$arch.tar}"

if [ -z "$binary" ]; then
  if [ "$arch" = arm64 ]; then
    cargo lambda build --release --locked --target aarch64-unknown-linux-musl --bin tc-queue
    binary=target/lambda/tc-queue/bootstrap
  else
    cargo build --release --locked --bin tc-queue
    binary=target/release/tc-queue
  fi
fi
[ -x "$binary" ] || { echo "build-image.sh: $binary is not an executable" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/etc/ssl/certs" "$work/layout/blobs/sha256"
cp "$binary" "$root/tc-queue"
chmod 0755 "$root/tc-queue"
for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  if [ -f "$ca" ]; then cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"; break; fi
done
# A dynamically linked binary of this machine's architecture takes its loader and libraries
# along (a static one, as the arm64 build is, needs none).
host_arch=$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
if [ "$arch" = "$host_arch" ] && ldd "$binary" >/dev/null 2>&1; then
  ldd "$binary" | grep -o '/[^ ]*' | while read -r lib; do
    [ -f "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
fi

blob() { # stores file $1 as a blob; prints its digest
  local d
  d=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$work/layout/blobs/sha256/$d"
  echo "$d"
}
size() { stat -c %s "$1"; }

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 < "$work/layer.tar" > "$work/layer.tar.gz"
layer=$(blob "$work/layer.tar.gz")

cat > "$work/config.json" <<EOF
{"architecture":"$arch","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":["/tc-queue"],"Env":["TCQ_BIND=0.0.0.0","TCQ_PORT=8080","TCQ_DATA_DIR=/data"],"ExposedPorts":{"8080/tcp":{}},"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]}}
EOF
config=$(blob "$work/config.json")

cat > "$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$(size "$work/config.json")},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$layer","size":$(size "$work/layer.tar.gz")}]}
EOF
manifest=$(blob "$work/manifest.json")

cat > "$work/layout/index.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$(size "$work/manifest.json"),"platform":{"architecture":"$arch","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}
EOF
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$out" .
echo "$out: sha256:$manifest ($arch, layer $(size "$work/layer.tar.gz") bytes)"
