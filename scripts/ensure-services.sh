#!/usr/bin/env bash
# Make sure the real services the functional tests use run on 127.0.0.1:
#   RabbitMQ (5672, guest/guest), MariaDB (3306, root without password), PostgreSQL (5432, trust).
# Where one is missing it is installed with apt-get (as root) and configured for local tests;
# where one is installed but stopped it is started; where it runs, it is left alone.
set -euo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {  # name port seconds
  local i
  for ((i = 0; i < $3; i++)); do
    port_open "$2" && return 0
    sleep 1
  done
  echo "ensure-services: $1 is not listening on 127.0.0.1:$2 after $3 s" >&2
  return 1
}

missing=()
command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
[ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "ensure-services: ${missing[*]} missing and not root: install them, or run as root" >&2
    exit 1
  fi
  echo "ensure-services: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! port_open 5672; then
  echo "ensure-services: starting RabbitMQ"
  rabbitmq-server -detached >/dev/null 2>&1 || true
  wait_port RabbitMQ 5672 90
fi

if ! port_open 3306; then
  echo "ensure-services: starting MariaDB"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql \
    --bind-address=127.0.0.1
  wait_port MariaDB 3306 60
fi
# A fresh Debian MariaDB authenticates root through the unix socket only: allow TCP without
# password for the local tests (this machine is a test machine).
if command -v mariadb >/dev/null 2>&1 \
    && ! mariadb -h 127.0.0.1 -u root -e 'select 1' >/dev/null 2>&1; then
  mariadb -u root -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password \
    USING PASSWORD(''); CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
    GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;"
fi

if ! port_open 5432; then
  echo "ensure-services: starting PostgreSQL"
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  wait_port PostgreSQL 5432 60
fi
if command -v psql >/dev/null 2>&1 \
    && ! psql -h 127.0.0.1 -U postgres -c 'select 1' >/dev/null 2>&1; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main reload
fi
echo "ensure-services: RabbitMQ, MariaDB and PostgreSQL are up on 127.0.0.1"
