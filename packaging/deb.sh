#!/usr/bin/env bash
# Builds consoled_<version>_<arch>.deb with dpkg-deb, no Debian source tree needed.
#
#   packaging/deb.sh                       target/release/consoled -> target/deb/ (`make deb`)
#   packaging/deb.sh --binary PATH --version V --out DIR --compress gzip
#                                          another build or version, packed fast (gzip at its
#                                          lowest level; tests/package.rs)
#
# The version comes from one place, Cargo.toml (`consoled --version` prints the same); the
# Debian changelog is made from CHANGELOG.md's entries. Needs dpkg-deb, strip and objdump
# (dpkg, binutils: there wherever Rust links).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
binary="$here/target/release/consoled"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/Cargo.toml" | head -n 1)
out="$here/target/deb"
compress=xz
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compress) compress=$2; shift 2 ;;
    *) echo "usage: deb.sh [--binary PATH] [--version V] [--out DIR] [--compress xz|gzip|none]" >&2; exit 2 ;;
    esac
done
[ -x "$binary" ] || { echo "deb.sh: no binary at $binary (cargo build --release)" >&2; exit 1; }
arch=$(dpkg --print-architecture)
# Dates in the package are the last commit's, so that a rebuild is byte for byte the same.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg="$work/consoled"
doc="$pkg/usr/share/doc/consoled"
install -d -m 0755 "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$doc/examples" \
    "$pkg/usr/share/man/man8"
install -d -m 0750 "$pkg/etc/consoled"
install -d -m 0700 "$pkg/etc/consoled/credentials"

install -m 0755 "$binary" "$pkg/usr/bin/consoled"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$pkg/usr/bin/consoled"
install -m 0644 "$here/contrib/consoled.service" "$pkg/lib/systemd/system/consoled.service"
install -m 0640 "$here/packaging/consoled.env" "$pkg/etc/consoled/consoled.env"
install -m 0644 "$here/packaging/copyright" "$doc/copyright"
for f in README.md docs/OPERATIONS.md docs/API.md docs/LOGS.md docs/METRICS.md docs/HARDENING.md; do
    gzip -9n <"$here/$f" >"$doc/$(basename "$f").gz"
done
for f in contrib/nginx.conf contrib/haproxy.cfg contrib/consoled.env; do
    install -m 0644 "$here/$f" "$doc/examples/$(basename "$f")"
done
sed "s/@VERSION@/$version/" "$here/packaging/consoled.8" | gzip -9n >"$pkg/usr/share/man/man8/consoled.8.gz"
"$here/packaging/changelog.sh" "$version" | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc"/*.gz "$pkg/usr/share/man/man8/consoled.8.gz"

for script in postinst prerm postrm; do
    install -m 0755 "$here/packaging/$script" "$pkg/DEBIAN/$script"
done
echo /etc/consoled/consoled.env >"$pkg/DEBIAN/conffiles"
# The newest glibc symbol version the binary needs is the libc6 it depends on.
glibc=$(objdump -T "$pkg/usr/bin/consoled" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: consoled
Version: $version
Architecture: $arch
Maintainer: consoled maintainers <consoled@example.com>
Installed-Size: $size
Depends: libc6 (>= $glibc), libgcc-s1 (>= 4.2)
Recommends: ca-certificates
Suggests: postgresql, nginx
Section: net
Priority: optional
Description: account sessions and a change stream for a cloud console
 consoled serves sign-up, sign-in, sessions, a second factor and Google and
 GitHub sign-in, and a Server-Sent-Events stream of resource changes fed by
 PostgreSQL LISTEN/NOTIFY, so that any number of instances on one database
 see every change. A synchronous, thread-per-connection server with a
 hardened systemd unit; set DATABASE_URL in /etc/consoled/consoled.env, then
 start consoled.service.
CONTROL
(cd "$pkg" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/control" "$pkg/DEBIAN/conffiles" "$pkg/DEBIAN/md5sums"
find "$pkg" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out"
deb="$out/consoled_${version}_${arch}.deb"
level=()
[ "$compress" = gzip ] && level=(-z1)
dpkg-deb --root-owner-group -Z"$compress" "${level[@]}" --build "$pkg" "$deb" >/dev/null
echo "$deb"
