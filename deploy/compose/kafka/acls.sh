#!/bin/sh
# The compose stack's Kafka ACLs, run once by the `kafka-acls` service (the apache/kafka
# image) as `admin`: one principal per component, each allowed only its part. Generated:
#   rackplane config acls --bootstrap kafka-1:9094 --command-config '"$ADMIN_CONFIG"'
# (tests/acl checks that this file is that output, and applies it to a real Kafka).
set -eu
: "${KAFKA_ADMIN_PASSWORD:?}"
PATH=/opt/kafka/bin:$PATH
ADMIN_CONFIG=/tmp/admin.properties
. /etc/kafka-compose/admin.sh
admin_properties "$ADMIN_CONFIG"
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Write --operation Describe --operation DescribeConfigs --topic rackplane.commands --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Write --operation Describe --operation DescribeConfigs --topic rackplane.events --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Write --operation Describe --operation DescribeConfigs --topic rackplane.rejected --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Write --operation Describe --operation DescribeConfigs --topic rackplane.snapshots --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Describe --operation DescribeConfigs --topic rackplane.telemetry --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Create --topic rackplane. --resource-pattern-type prefixed
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation All --topic rackplane- --resource-pattern-type prefixed
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Read --operation Describe --group rackplane --resource-pattern-type prefixed
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation Write --operation Describe --transactional-id rackplane --resource-pattern-type prefixed
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:worker --operation IdempotentWrite --operation Describe --cluster
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:client --operation Write --operation Describe --topic rackplane.commands --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:client --operation Read --operation Describe --topic rackplane.events --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:client --operation Read --operation Describe --topic rackplane.rejected --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:client --operation Read --operation Describe --topic rackplane.snapshots --resource-pattern-type literal
kafka-acls.sh --bootstrap-server kafka-1:9094 --command-config "$ADMIN_CONFIG" --add --allow-principal User:exporter --operation Write --operation Describe --topic rackplane.telemetry --resource-pattern-type literal
