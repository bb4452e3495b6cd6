#!/bin/sh
# Builds a Debian root filesystem with Python for dockhand's base image, for
# machines where `python:X.Y-slim` cannot be pulled (no registry reachable).
#
# Usage: bootstrap.sh SUITE MIRROR WORKDIR
#   SUITE    Debian release (bookworm -> Python 3.11, trixie -> Python 3.13)
#   MIRROR   Debian mirror URL (plain http works behind TLS-intercepting proxies)
#   WORKDIR  an empty directory; the root filesystem is written to
#            WORKDIR/rootfs.tar (WORKDIR/rootfs is scratch space)
#
# Needs root and debootstrap on the host. The SDK embeds this file and runs it;
# it is also usable by hand. Output is imported with `FROM scratch` + `ADD`.
set -eu

SUITE="$1"
MIRROR="$2"
WORKDIR="$3"
ROOTFS="$WORKDIR/rootfs"
OUT_TAR="$WORKDIR/rootfs.tar"

# The caller removes WORKDIR; removing the tree early halves the disk used.
cleanup() { rm -rf "$ROOTFS"; }
trap cleanup EXIT INT TERM
mkdir -p "$ROOTFS"

# minbase keeps apt (for apt packages in derived images) and little else.
# python3-pip/python3-venv so pip packages install; ca-certificates so https works.
"${DEBOOTSTRAP:-debootstrap}" --variant=minbase \
    --include=python3,python3-pip,python3-venv,ca-certificates \
    "$SUITE" "$ROOTFS" "$MIRROR"

# apt inside derived images talks to the same mirror, with the point-release
# updates and Debian's security updates (on the mirror's sibling path,
# http://deb.debian.org/debian-security for http://deb.debian.org/debian).
SECURITY_MIRROR="${MIRROR%/}-security"
cat > "$ROOTFS/etc/apt/sources.list" <<EOF_SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF_SOURCES

# Apply them now: the image starts with every security fix published today.
# The chroot resolves names with the host's resolver while it runs.
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mount -t proc proc "$ROOTFS/proc"
cleanup() { umount "$ROOTFS/proc" 2>/dev/null || true; rm -rf "$ROOTFS"; }
chroot "$ROOTFS" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get upgrade -y -qq -o Dpkg::Options::=--force-confold >/dev/null && apt-get clean'
umount "$ROOTFS/proc"

# Smaller image, and nothing host-specific baked in.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb \
       "$ROOTFS"/var/lib/apt/lists/* \
       "$ROOTFS"/var/log/* \
       "$ROOTFS"/tmp/* 2>/dev/null || true
: > "$ROOTFS/etc/hostname"
: > "$ROOTFS/etc/resolv.conf"

tar -C "$ROOTFS" --numeric-owner -cf "$OUT_TAR" .
