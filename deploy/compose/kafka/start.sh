#!/bin/sh
# Start one Kafka node of the compose stack (the apache/kafka image): fill in
# server.properties.template, format the storage on first start with the SCRAM users
# (passwords from the environment: .env, made by ../init.sh), then run the broker.
set -eu
KAFKA_HOME=${KAFKA_HOME:-/opt/kafka}       # the image's; tests/deploy runs this with stand-ins
HERE=${KAFKA_COMPOSE_DIR:-/etc/kafka-compose}
RUN=${KAFKA_RUN_DIR:-/tmp}
: "${NODE_ID:?}" "${CLUSTER_ID:?}" "${KAFKA_ADMIN_PASSWORD:?}" "${KAFKA_WORKER_PASSWORD:?}"
: "${KAFKA_CLIENT_PASSWORD:?}" "${KAFKA_EXPORTER_PASSWORD:?}"
props=$RUN/server.properties
sed -e "s|\${NODE_ID}|${NODE_ID}|g" \
    -e "s|\${QUORUM_VOTERS}|1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093|g" \
    -e "s|\${BIND}||g" -e "s|\${HOST}|kafka-${NODE_ID}|g" \
    -e "s|\${CLIENT_PORT}|9094|g" -e "s|\${INTERNAL_PORT}|9092|g" \
    -e "s|\${CONTROLLER_PORT}|9093|g" -e "s|\${CERTS}|/etc/kafka-certs|g" \
    -e "s|\${DATA}|/var/lib/kafka/data|g" -e "s|\${REPLICATION}|3|g" -e "s|\${MIN_ISR}|2|g" \
    "$HERE/server.properties.template" > "$props"
scram() { printf 'SCRAM-SHA-512=[name=%s,password=%s]' "$1" "$2"; }
"$KAFKA_HOME/bin/kafka-storage.sh" format --ignore-formatted -t "$CLUSTER_ID" -c "$props" \
    --add-scram "$(scram admin "$KAFKA_ADMIN_PASSWORD")" \
    --add-scram "$(scram worker "$KAFKA_WORKER_PASSWORD")" \
    --add-scram "$(scram client "$KAFKA_CLIENT_PASSWORD")" \
    --add-scram "$(scram exporter "$KAFKA_EXPORTER_PASSWORD")"
. "$HERE/admin.sh"  # what the healthcheck connects with (/tmp/admin.properties)
admin_properties "$RUN/admin.properties"
exec "$KAFKA_HOME/bin/kafka-server-start.sh" "$props"
