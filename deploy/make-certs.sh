#!/usr/bin/env bash
# Makes a small certificate authority for a Colibri lab and one certificate
# per host, signed by it, plus the cluster's shared token:
#
#   deploy/make-certs.sh OUT_DIR HOST[,NAME|IP...] ...
#   deploy/make-certs.sh /tmp/lab coord.lab node1.lab,10.0.0.11 node2.lab,10.0.0.12
#
# writes OUT_DIR/ca.crt and ca.key (keep ca.key off the cluster), and for each
# HOST OUT_DIR/HOST/host.crt and host.key, whose subjectAltName lists HOST and
# the extra names and IP addresses after it (add the IPs when nodes are found
# by DNS discovery, which dials addresses). Each certificate serves and is a
# client certificate (mutual TLS between coordinator and nodes). OUT_DIR/token
# is a random 256-bit token, made once. Running it again keeps the CA, the
# token and existing host certificates; it adds the hosts that are new.
# Needs openssl. Keys are written mode 0600.
set -euo pipefail

if [ "$#" -lt 2 ] || [ "$1" = "--help" ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  [ "$#" -ge 1 ] && [ "$1" = "--help" ] && exit 0
  exit 2
fi
out="$1"
shift
days="${COLIBRI_CERT_DAYS:-825}"
umask 077
mkdir -p "$out"

if [ ! -f "$out/ca.key" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$out/ca.key" -out "$out/ca.crt" -days 3650 -subj "/CN=Colibri lab CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2> /dev/null
  chmod 0644 "$out/ca.crt"
  echo "make-certs: CA $out/ca.crt"
fi
if [ ! -f "$out/token" ]; then
  openssl rand -hex 32 > "$out/token"
  echo "make-certs: token $out/token"
fi

for spec in "$@"; do
  IFS=',' read -r -a names <<< "$spec"
  host="${names[0]}"
  if [[ ! "$host" =~ ^[A-Za-z0-9._-]+$ ]]; then
    echo "make-certs: '$host' is not a host name" >&2
    exit 2
  fi
  dir="$out/$host"
  if [ -f "$dir/host.crt" ]; then
    echo "make-certs: $dir/host.crt exists, kept"
    continue
  fi
  mkdir -p "$dir"
  san=""
  for name in "${names[@]}"; do
    if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
      san+="${san:+,}IP:$name"
    else
      san+="${san:+,}DNS:$name"
    fi
  done
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/host.key" -out "$dir/host.csr" -subj "/CN=$host" 2> /dev/null
  openssl x509 -req -in "$dir/host.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -out "$dir/host.crt" -days "$days" \
    -extfile <(printf '%s\n' "subjectAltName=$san" "basicConstraints=CA:FALSE" \
      "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth,clientAuth") 2> /dev/null
  rm -f "$dir/host.csr"
  chmod 0644 "$dir/host.crt"
  install -m 0644 "$out/ca.crt" "$dir/ca.crt"
  echo "make-certs: $dir/host.crt ($san)"
done
