#!/usr/bin/env bash
# Builds the Gitea the tests run (conductor/testenv.Gitea) once, into a cache
# folder keyed by version, and leaves it there for every later run:
#
#   ${CONDUCTOR_GITEA_CACHE:-/var/cache/conductor}/gitea-VERSION/
#       gitea  options/  templates/  public/
#
# The source is the Go module code.gitea.io/gitea@vVERSION from the Go module
# proxy (no npm step: the API needs only the module's options, templates and
# public folders at run time). ~30 s download, ~200 s compile on 2 cores.
# Usage: scripts/gitea-build.sh [VERSION]   (default 1.27.3)
set -euo pipefail
version=${1:-${CONDUCTOR_GITEA_VERSION:-1.27.3}}
cache=${CONDUCTOR_GITEA_CACHE:-/var/cache/conductor}
dest="$cache/gitea-$version"
if [ -x "$dest/gitea" ] && [ -d "$dest/options" ] && [ -d "$dest/templates" ] && [ -d "$dest/public" ]; then
  echo "gitea-build: $dest/gitea is already built"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.gitea-build.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
echo "gitea-build: downloading code.gitea.io/gitea@v$version"
dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "code.gitea.io/gitea@v$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || { echo "gitea-build: go mod download gave no module folder" >&2; exit 1; }
cp -r "$dir" "$tmp/src"
mkdir -p "$tmp/out"
chmod -R u+w "$tmp/src"
echo "gitea-build: compiling (a few minutes)"
# Without -X main.Version the server reports "development" and the SDK
# warns on every call.
(cd "$tmp/src" && go build -trimpath -tags 'sqlite sqlite_unlock_notify' \
  -ldflags "-s -w -X \"main.Version=$version\"" -o "$tmp/out/gitea" .)
cp -r "$tmp/src/options" "$tmp/src/templates" "$tmp/src/public" "$tmp/out/"
chmod -R a+rX "$tmp/out"
chmod 0755 "$cache" "$tmp/out"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "gitea-build: built $dest/gitea"
