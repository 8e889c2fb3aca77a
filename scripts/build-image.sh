#!/usr/bin/env bash
# Build the LEVELLER container image (agent, controller, SDN app; entry point `leveller`) from Debian's
# packages only, idempotently:
#  1. a Debian root file system made by debootstrap (minbase: python3, python3-venv, libbpf1, iproute2,
#     ca-certificates; no compiler), cached as a tarball under $LEVELLER_IMAGE_CACHE (default
#     /var/cache/leveller/image, outside the checkout so `make clean` and other worktrees keep it),
#     keyed by suite, mirror and package list, and imported into podman's storage as the base image;
#  2. the leveller wheel built from a copy of the checkout's files, carrying the CO-RE object
#     (make -C bpf), in build/image/;
#  3. `podman build` of deploy/container/Containerfile on that base (chroot isolation: its RUN steps need no
#     OCI runtime, cgroups or resource limits of their own): the dependencies from PyPI as
#     wheels (a cached layer while pyproject.toml's list is unchanged), then the wheel.
# A second run reuses the tarball, the base image and podman's layers. Needs root (debootstrap, podman)
# and podman, buildah, debootstrap (scripts/setup-system.sh). Usage: build-image.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${1:-.venv/bin/python}
IMAGE=${LEVELLER_IMAGE:-localhost/leveller:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)}
CACHE=${LEVELLER_IMAGE_CACHE:-/var/cache/leveller/image}
SUITE=${LEVELLER_IMAGE_SUITE:-bookworm}
MIRROR=${LEVELLER_IMAGE_MIRROR:-http://deb.debian.org/debian}
DEBS=python3,python3-venv,libbpf1,iproute2,ca-certificates
BUILD=build/image

log() { printf 'image: %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { log "needs root (debootstrap, podman's root storage): sudo make image"; exit 1; }
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { log "$tool missing: run make system (scripts/setup-system.sh)"; exit 1; }
done

# 1. the root file system and the base image
key=$(printf '%s\n' minbase "$SUITE" "$MIRROR" "$DEBS" | sha256sum | cut -c1-12)
tarball=$CACHE/rootfs-$SUITE-$key.tar
base=localhost/leveller-base:$SUITE-$key
if [ ! -f "$tarball" ]; then
  log "debootstrap $SUITE ($DEBS) from $MIRROR into $CACHE"
  mkdir -p "$CACHE"
  root=$CACHE/rootfs-$key.tmp
  rm -rf "$root"
  debootstrap --variant=minbase --include="$DEBS" "$SUITE" "$root" "$MIRROR" >"$CACHE/debootstrap-$key.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap-$key.log" >&2; log "debootstrap failed (log: $CACHE/debootstrap-$key.log)"; exit 1; }
  # what a container never reads: the package lists and downloads, manual pages, logs
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/var/log/* "$root"/var/cache/debconf/*-old
  tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
fi
if ! podman image exists "$base"; then
  log "importing $tarball as $base"
  podman import --quiet "$tarball" "$base" >/dev/null
fi

# 2. the wheel, from a copy of the checkout's files (tracked, or new and not ignored) and the CO-RE object
make -s -C bpf
rm -rf "$BUILD/src" "$BUILD/context"
mkdir -p "$BUILD/src" "$BUILD/context"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -f "$f" ] && printf '%s\0' "$f"
done | xargs -0 cp --parents -t "$BUILD/src"
cp --parents -t "$BUILD/src" bpf/build/flow_marker.bpf.o bpf/build/flow_marker.bpf.sha256
# fixed timestamps in the zip: the same tree gives the same wheel, so podman's layer of it is reused
SOURCE_DATE_EPOCH=315532800 "$PY" -m pip wheel "$BUILD/src" --no-build-isolation --no-deps --no-index -q \
  -w "$BUILD/context" 2> >(grep -v "^WARNING: Location 'file:" >&2)
rm -rf "$BUILD/src"
"$PY" - "$BUILD/context/requirements.txt" <<'PYEOF'
import sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
open(sys.argv[1], "w").write("".join(f"{d}\n" for d in deps))
PYEOF

# 3. the image
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
log "podman build $IMAGE on $base"
# pip in the build trusts what the host's pip trusts (a proxy's CA, say): the host's bundle, mounted for the
# RUN steps only, not copied into the image
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
podman build --quiet --pull=never --network=host --isolation=chroot --layers --build-arg "BASE=$base" \
  --build-arg "PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-180}" \
  --volume "$(realpath "$ca"):/run/leveller-build-ca.crt:ro" --build-arg PIP_CERT=/run/leveller-build-ca.crt \
  --label org.opencontainers.image.title=leveller --label "io.leveller.base=$base" \
  -f deploy/container/Containerfile -t "$IMAGE" "$BUILD/context" >/dev/null
new=$(podman image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old" ] && [ "$old" != "$new" ] && [ -z "$(podman image inspect --format '{{.RepoTags}}' "$old" | tr -d '[]')" ]; then
  podman rmi "$old" >/dev/null 2>&1 || true  # the image this tag named before, untagged now (not a cached layer)
fi
log "$IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}') (id ${new:0:12})"
