#!/usr/bin/env bash
# A Redis server on loopback for Kiln's remote tier (KILN_REMOTE_CACHE).
#
#   scripts/start-redis.sh            install redis-server if missing, start one
#                                     on 127.0.0.1 on a free port (daemonized,
#                                     no persistence) and print its URL
#   scripts/start-redis.sh --install  only install what the remote tier's tests
#                                     need: redis-server, and openssl (the TLS
#                                     test makes its certificates with it)
#   scripts/start-redis.sh --stop     stop the server this script started
#
#   export KILN_REMOTE_CACHE="$(scripts/start-redis.sh)"
#
# The state (pid file, log, port) lives in $KILN_REDIS_DIR
# (default: ${TMPDIR:-/tmp}/kiln-redis). The tests of the remote tier start
# their own private servers and need only redis-server on PATH.
set -euo pipefail

state_dir="${KILN_REDIS_DIR:-${TMPDIR:-/tmp}/kiln-redis}"
pid_file="$state_dir/redis.pid"

say() { echo "start-redis: $*" >&2; }

# Installs the Debian packages named, unless their commands are on PATH.
# Arguments: command package, command package, ...
install_missing() {
    local missing=()
    while [ $# -gt 0 ]; do
        command -v "$1" >/dev/null 2>&1 || missing+=("$2")
        shift 2
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        say "missing ${missing[*]} and apt-get is not available: install them yourself (Redis 6 or later)"
        exit 1
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    say "installing ${missing[*]} from the distribution's packages"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

install_redis() {
    install_missing redis-server redis-server redis-cli redis-tools
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

stop_redis() {
    if [ ! -f "$pid_file" ]; then
        say "no server started by this script (no $pid_file)"
        return 0
    fi
    local pid
    pid="$(cat "$pid_file")"
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        say "stopped redis-server (pid $pid)"
    fi
    rm -f "$pid_file" "$state_dir/port"
}

start_redis() {
    install_redis
    mkdir -p "$state_dir"
    if [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
        echo "redis://127.0.0.1:$(cat "$state_dir/port")/0"
        return 0
    fi
    local port
    port="$(free_port)"
    redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes \
        --save "" --appendonly no --dir "$state_dir" \
        --daemonize yes --pidfile "$pid_file" --logfile "$state_dir/redis.log" >&2
    for _ in $(seq 100); do
        if redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
            echo "$port" > "$state_dir/port"
            echo "redis://127.0.0.1:$port/0"
            return 0
        fi
        sleep 0.1
    done
    say "redis-server did not answer on 127.0.0.1:$port; see $state_dir/redis.log"
    exit 1
}

case "${1:-}" in
    "") start_redis ;;
    --install) install_missing redis-server redis-server redis-cli redis-tools openssl openssl ;;
    --stop) stop_redis ;;
    *) say "usage: $0 [--install | --stop]"; exit 2 ;;
esac
