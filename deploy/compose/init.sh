#!/bin/sh
# One-time set-up of the compose stack, beside this file (both git-ignored):
#   certs/  a CA (ca.crt, ca.key) and the brokers' certificate (broker.pem: chain and
#           key, CN=kafka-broker, for kafka-1..3, localhost and 127.0.0.1), with openssl
#   .env    the Kafka users' passwords and the workers' web token, random
# Files that exist are kept. `init.sh DIR` writes into DIR instead (the ACL tier does).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out/certs"
cd "$out/certs"
umask 077
if [ ! -f ca.crt ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=rackplane-compose-ca" \
        -keyout ca.key -out ca.crt 2>/dev/null
fi
if [ ! -f broker.pem ]; then
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kafka-broker" \
        -keyout broker.key -out broker.csr 2>/dev/null
    printf '%s\n%s\n' \
        "subjectAltName=DNS:kafka-1,DNS:kafka-2,DNS:kafka-3,DNS:localhost,IP:127.0.0.1" \
        "extendedKeyUsage=serverAuth,clientAuth" > broker.ext
    openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
        -extfile broker.ext -out broker.crt 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8
    cat broker.crt ca.crt broker.p8 > broker.pem
    rm -f broker.csr broker.ext broker.key broker.crt broker.p8 ca.srl
fi
chmod 644 ca.crt broker.pem  # the containers' users (not this host's) read them
cd "$out"
if [ ! -f .env ]; then
    secret() { openssl rand -base64 32 | tr -d '/+=\n'; }
    {
        echo "KAFKA_ADMIN_PASSWORD=$(secret)"
        echo "KAFKA_WORKER_PASSWORD=$(secret)"
        echo "KAFKA_CLIENT_PASSWORD=$(secret)"
        echo "KAFKA_EXPORTER_PASSWORD=$(secret)"
        echo "RACKPLANE_WEB_TOKEN=$(secret)"
    } > .env
fi
echo "compose secrets ready in $out (certs/, .env)"
