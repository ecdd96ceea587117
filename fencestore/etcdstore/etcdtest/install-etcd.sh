#!/usr/bin/env bash
# Installs the etcd server that the etcd store's tests start (etcdtest),
# and etcdutl beside it (the offline tool whose snapshot restore a test runs):
# built from its source at a pinned version through the Go module proxy,
# the one registry of Go code that CI reaches (Debian's etcd-server is
# 3.4.23, a release line etcd no longer maintains). The build runs in a
# temporary module, so the project's go.mod never sees the server's
# dependencies. Nothing is done when etcd of that version is on PATH.
#
#   bash fencestore/etcdstore/etcdtest/install-etcd.sh   # as root: /usr/local/bin/etcd
#   DEST=$HOME/bin bash fencestore/etcdstore/etcdtest/install-etcd.sh
#
# About two minutes of compiling on two cores, plus the modules' download on
# a machine that has none of them cached.
set -euo pipefail
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
want="etcd Version: ${ETCD_VERSION#v}"
# The version is read whole before it is matched: with pipefail, a grep -q
# that stops at the first line would fail the pipe (SIGPIPE) whenever etcd
# writes its later lines after that.
if command -v etcd >/dev/null 2>&1 && grep -qx "$want" <<<"$(etcd --version 2>/dev/null || true)" &&
  [ -x "$(dirname "$(command -v etcd)")/etcdutl" ]; then
  exit 0
fi
if [ -z "${DEST:-}" ]; then
  if [ -w /usr/local/bin ]; then DEST=/usr/local/bin; else DEST=$(go env GOPATH)/bin; fi
fi
mkdir -p "$DEST"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-mod=mod GOWORK=off CGO_ENABLED=0
go mod init etcd-build >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
# The server module's root package is etcd's main package.
go build -trimpath -o "$DEST/etcd.new" go.etcd.io/etcd/server/v3
mv "$DEST/etcd.new" "$DEST/etcd"
go get "go.etcd.io/etcd/etcdutl/v3@${ETCD_VERSION}" >/dev/null 2>&1 || go get "go.etcd.io/etcd/etcdutl/v3@${ETCD_VERSION}"
go build -trimpath -o "$DEST/etcdutl.new" go.etcd.io/etcd/etcdutl/v3
mv "$DEST/etcdutl.new" "$DEST/etcdutl"
version=$("$DEST/etcd" --version)
echo "${version%%$'\n'*}"
case ":$PATH:" in *":$DEST:"*) ;; *) echo "note: $DEST is not on PATH (or set FENCE_ETCD_BIN=$DEST/etcd)" >&2 ;; esac
