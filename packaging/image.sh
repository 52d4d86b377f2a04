#!/usr/bin/env bash
# Builds sip's container image from Containerfile (make image).
#   IMAGE       the name it gets (default localhost/sip:latest)
#   IMAGE_BASE  registry: FROM debian:bookworm and debian:bookworm-slim as
#               published (default); debian: both built here from Debian's
#               packages with mmdebstrap (no container registry needed) and
#               imported as localhost/sip-debian:bookworm and :bookworm-slim
#   IMAGE_JOBS  parallel compile jobs in the build stage (default 2)
# Uses buildah when present (`buildah bud --isolation chroot`: no daemon, no
# user namespaces needed), podman otherwise. The base tarballs are cached in
# $SIP_CACHE/image (default ~/.cache/sip/image).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
image=${IMAGE:-localhost/sip:latest}
base=${IMAGE_BASE:-registry}
jobs=${IMAGE_JOBS:-2}
cache=${SIP_CACHE:-$HOME/.cache/sip}/image

if command -v buildah >/dev/null 2>&1; then
  build=(buildah bud --isolation chroot --format docker --layers)
elif command -v podman >/dev/null 2>&1; then
  build=(podman build --format docker --layers)
else
  echo "image: neither buildah nor podman is installed (scripts/deps.sh installs both)" >&2
  exit 1
fi

# debian_base bookworm|bookworm-slim (packaging/debian-base.sh): the base
# made from Debian's packages and imported as localhost/sip-debian:<name>.
source "$root/packaging/debian-base.sh"

args=(--build-arg "JOBS=$jobs")
if [ "$base" = debian ]; then
  debian_base bookworm
  debian_base bookworm-slim
  args+=(--build-arg BUILD_IMAGE=localhost/sip-debian:bookworm
         --build-arg RUNTIME_IMAGE=localhost/sip-debian:bookworm-slim)
elif [ "$base" != registry ]; then
  echo "image: IMAGE_BASE='$base': expected registry or debian" >&2
  exit 2
fi
echo "image: ${build[0]} building $image (build stage with -j$jobs)"
"${build[@]}" "${args[@]}" -f "$root/Containerfile" -t "$image" "$root"
echo "image: $image"
