#!/usr/bin/env bash
# Debian 12 base images made here from Debian's packages, for the container
# image (packaging/image.sh) and the package test (tests/integration/
# test_deb_root.py): no container registry is needed.
#   packaging/debian-base.sh bookworm|bookworm-slim
# builds (once; cached in $SIP_CACHE/image, default ~/.cache/sip/image) the
# tarball with `mmdebstrap --variant=minbase`, imports it with podman as
# localhost/sip-debian:<name> (again only when the tarball changed), and
# prints that name. Sourced, it defines debian_base for image.sh.
set -euo pipefail
cache=${SIP_CACHE:-$HOME/.cache/sip}/image

# debian_base NAME: the tarball (cached) and the image made from it.
debian_base() {
  local name=$1 tar="$cache/debian-$1.tar" opts=()
  if [ "$name" = bookworm-slim ]; then
    # What Debian's slim images leave out: documentation but copyrights,
    # manuals, info pages, translations.
    opts=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
          --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
          --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
          --dpkgopt='path-exclude=/usr/share/locale/*')
  fi
  if [ ! -f "$tar" ]; then
    command -v mmdebstrap >/dev/null 2>&1 ||
      { echo "image: mmdebstrap is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
    mkdir -p "$cache"
    echo "image: building the $name base from Debian's packages (mmdebstrap)"
    mmdebstrap --quiet --variant=minbase "${opts[@]}" bookworm "$cache/.debian-$name.tar" >&2
    mv "$cache/.debian-$name.tar" "$tar"
  fi
  local ref="localhost/sip-debian:$name" stamp
  stamp=$(stat -c %Y "$tar")
  # Imported again only when the tarball changed (its mtime is the label).
  if [ "$(podman image inspect --format '{{index .Labels "org.sip.base-mtime"}}' "$ref" 2>/dev/null)" != "$stamp" ]; then
    command -v podman >/dev/null 2>&1 ||
      { echo "image: podman is needed to import the base tarball (scripts/deps.sh installs it)" >&2; exit 1; }
    podman import --change "LABEL org.sip.base-mtime=$stamp" --change 'CMD ["/bin/bash"]' \
      "$tar" "$ref" >/dev/null
  fi
}


if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    bookworm|bookworm-slim) debian_base "$1"; echo "localhost/sip-debian:$1" ;;
    *) echo "usage: $0 bookworm|bookworm-slim" >&2; exit 2 ;;
  esac
fi
