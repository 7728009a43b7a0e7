#!/usr/bin/env bash
# Builds the local base images that docker/compose.local.yaml uses, for a host that reaches
# Debian's package mirror but no container registry (`docker pull` fails there):
#
#   kernel-grader-base/debian:bookworm-<recipe hash>    debootstrap bookworm, `docker import`
#   kernel-grader-base/python:3.11-bookworm-<hash>      + Debian's python3.11 in a venv (api, CPU worker)
#   kernel-grader-base/postgres:15-bookworm-<hash>      + Debian's postgresql-15, official-image contract
#
# and tags the last two also as ...:3.11-bookworm-local and ...:15-bookworm-local, the names the
# compose override refers to. Each tag carries a hash of the files it is built from (this
# script, the Dockerfiles, the entrypoint): an image whose tag already exists is not built
# again, so a second run takes seconds; editing any of those files makes a new tag. Package
# versions come from Debian's mirror on the day of the first build (bookworm point releases
# change them); rebuild with REFRESH=1 to pick up security updates.
#
# The host's own extra certificate authorities (*.crt in EXTRA_CA_DIR, by default
# /usr/local/share/ca-certificates, where update-ca-certificates takes them from) are added to
# the Debian image's trust store: a host whose HTTPS goes through a TLS-inspecting proxy needs
# that for pip to reach PyPI inside `docker build`. They are public certificates, and part of
# the recipe hash (a new CA makes new images).
#
# Needs: root, debootstrap, a running Docker engine (docker/local/start-engine.sh).
# Usage: docker/local/build-base-images.sh          (REFRESH=1 to rebuild all three)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
REFRESH="${REFRESH:-0}"
EXTRA_CA_DIR="${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"
shopt -s nullglob
extra_cas=("$EXTRA_CA_DIR"/*.crt)
shopt -u nullglob

log() { printf '[base-images %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# The recipe hash: any change to what builds an image changes its tag.
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# remove_stale NAME CURRENT-TAG: drop the tags of older recipes (with the vfs storage driver
# every image is a full copy on disk); the -local alias and images in use stay.
remove_stale() {
    docker image ls --format '{{.Repository}}:{{.Tag}}' "kernel-grader-base/$1" \
        | grep -vxF -e "$2" | grep -v -- '-local$' \
        | xargs -r docker image rm >/dev/null 2>&1 || true
}

debian_hash="$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" | cat - "$here/build-base-images.sh" "${extra_cas[@]}" | sha256sum | cut -c1-12)"
debian_tag="kernel-grader-base/debian:${SUITE}-${debian_hash}"

if [ "$REFRESH" = 1 ] || ! image_exists "$debian_tag"; then
    log "debootstrap $SUITE from $MIRROR -> $debian_tag"
    rootfs="$(mktemp -d /var/tmp/kernel-grader-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    # minbase: essential packages and apt only; ca-certificates for HTTPS (PyPI) in builds.
    debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$rootfs" "$MIRROR" >/dev/null
    # debootstrap writes only the main suite: add updates and security, as Debian's own image has.
    cat > "$rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
SOURCES
    # What Debian's official image does for containers: no package caches or docs kept by apt,
    # no daemons started by package scripts during `docker build`.
    printf '%s\n' '#!/bin/sh' 'exit 101' > "$rootfs/usr/sbin/policy-rc.d" && chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
    cat > "$rootfs/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
APT
    printf '%s\n' 'Acquire::Languages "none";' > "$rootfs/etc/apt/apt.conf.d/docker-no-languages"
    if [ "${#extra_cas[@]}" -gt 0 ]; then
        log "trusting the host's extra CAs: ${extra_cas[*]}"
        cp "${extra_cas[@]}" "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >/dev/null
    fi
    # (APT::Sandbox::User=root: the chroot has no _apt user yet that may write its lists.)
    chroot "$rootfs" apt-get -o APT::Sandbox::User=root update -qq
    chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root -qq -y upgrade >/dev/null
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/log/*.log \
           "$rootfs"/var/log/apt/* "$rootfs"/tmp/* "$rootfs"/etc/hostname "$rootfs"/etc/resolv.conf
    # mktemp made the directory 0700, and tar records "." as the image's "/".
    chmod 0755 "$rootfs"
    # /dev, /proc and /sys are the engine's at run time.
    tar --numeric-owner --xattrs -C "$rootfs" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -c . \
        | docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["bash"]' \
            --message "debootstrap --variant=minbase $SUITE $MIRROR (docker/local/build-base-images.sh)" \
            - "$debian_tag" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
else
    log "cached: $debian_tag"
fi

docker tag "$debian_tag" "kernel-grader-base/debian:${SUITE}-local"
remove_stale debian "$debian_tag"

# build_on_debian NAME TAG-PREFIX FILES...: build service NAME of compose.base.yaml on the
# Debian image above, tagged TAG-PREFIX-<hash of the Debian tag and FILES>, then TAG-PREFIX-local.
build_on_debian() {
    local name="$1" prefix="$2"; shift 2
    local hash tag
    hash="$(printf '%s\n' "$debian_tag" | cat - "$@" | sha256sum | cut -c1-12)"
    tag="kernel-grader-base/${name}:${prefix}-${hash}"
    if [ "$REFRESH" = 1 ] || ! image_exists "$tag"; then
        log "build docker/local/$name.Dockerfile -> $tag"
        DEBIAN_IMAGE="$debian_tag" IMAGE_TAG="${prefix}-${hash}" \
            docker compose -f "$here/compose.base.yaml" build --quiet "$name"
    else
        log "cached: $tag"
    fi
    docker tag "$tag" "kernel-grader-base/${name}:${prefix}-local"
    remove_stale "$name" "$tag"
}

build_on_debian python 3.11-bookworm "$here/python.Dockerfile" "$here/compose.base.yaml"
build_on_debian postgres 15-bookworm "$here/postgres.Dockerfile" "$here/postgres-entrypoint.sh" "$here/compose.base.yaml"
log "done: $(docker image ls --format '{{.Repository}}:{{.Tag}} ({{.Size}})' 'kernel-grader-base/*' | grep -- '-local ' | tr '\n' ' ')"
