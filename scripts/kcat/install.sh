#!/bin/sh
# Install kcat (the Kafka CLI client) into the virtualenv without root, for the interop tests.
#
# Usage: scripts/kcat/install.sh VENV
# Does nothing when `kcat` is already on PATH or in VENV/bin. Otherwise fetches Debian's kcat
# and its libraries with `apt-get download` (no root needed), unpacks them with `dpkg -x` into
# VENV/kcat, and writes VENV/bin/kcat, a wrapper that points the loader at those libraries.
set -eu
VENV=${1:?usage: install.sh VENV}
if command -v kcat >/dev/null 2>&1 || [ -x "$VENV/bin/kcat" ]; then
    exit 0
fi
for tool in apt-get dpkg; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "kcat is missing and $tool is not available: install kcat (Debian/Ubuntu: apt install kcat)" >&2
        exit 1
    }
done
ROOT=$(cd "$VENV" && pwd)/kcat
DEBS=$(mktemp -d)
trap 'rm -rf "$DEBS"' EXIT
mkdir -p "$ROOT"
cd "$DEBS"
echo "installing kcat into $ROOT (apt-get download + dpkg -x)"
apt-get download kcat librdkafka1 libyajl2 2>/dev/null || apt-get download kcat librdkafka1 libyajl2
for deb in ./*.deb; do dpkg -x "$deb" "$ROOT"; done
LIBS="$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/usr/lib/aarch64-linux-gnu:$ROOT/usr/lib"
if LD_LIBRARY_PATH="$LIBS" ldd "$ROOT/usr/bin/kcat" | grep -q "not found"; then
    # A slimmer system: fetch librdkafka's own dependencies too.
    rm -f ./*.deb
    apt-get download liblz4-1 libsasl2-2 libssl3 libzstd1 zlib1g 2>/dev/null
    for deb in ./*.deb; do dpkg -x "$deb" "$ROOT"; done
fi
cat > "$ROOT/../bin/kcat" <<WRAPPER
#!/bin/sh
LD_LIBRARY_PATH="$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$ROOT/usr/bin/kcat" "\$@"
WRAPPER
chmod +x "$ROOT/../bin/kcat"
"$ROOT/../bin/kcat" -V | head -1
