# Sourced by start.sh and acls.sh: `admin_properties FILE` writes the client properties of
# the `admin` user (SCRAM over TLS, password from KAFKA_ADMIN_PASSWORD).
admin_properties() {
    cat > "$1" <<PROPERTIES
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${KAFKA_ADMIN_PASSWORD}";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka-certs/ca.crt
PROPERTIES
}
