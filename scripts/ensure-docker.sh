#!/usr/bin/env bash
# Make sure a working Docker daemon answers `docker info`, installing it on Debian if needed.
#
# Idempotent: exits 0 at once when `docker info` already works. Otherwise, as root on Debian,
# installs docker.io and debootstrap from the Debian archive (the node image is built from the
# archive with debootstrap, because no container registry may be reachable), starts dockerd in
# the background (log: /var/log/dockerd.log) and waits until it answers.
# Exit codes: 0 ready; 3 Docker is not available and this script cannot install it (kiln's
# "environment" exit code).
set -euo pipefail

readonly LOG=/var/log/dockerd.log
readonly WAIT_SECONDS="${KILN_DOCKERD_WAIT:-60}"
# Everything the sandbox node image build needs besides Docker itself.
readonly PACKAGES=(docker.io debootstrap ca-certificates iptables)

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

how_to_get_docker() {
  cat >&2 <<'EOF'
ensure-docker: Docker is not available and this script can only install it as root on Debian.
  Install Docker Engine (https://docs.docker.com/engine/install/) and debootstrap, start the
  daemon, make sure `docker info` works for your user, then run `make sandbox` again.
EOF
  exit 3
}

docker_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && docker_answers; then
  exit 0
fi

if [[ "$(id -u)" -ne 0 ]] || ! grep -qsE '^ID=debian' /etc/os-release; then
  how_to_get_docker
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]} from the Debian archive"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The daemon. A client-only binary (e.g. /usr/local/bin/docker) may sit earlier on PATH than the
# packaged one: that is fine as a client, but the daemon must be the packaged /usr/bin/dockerd.
dockerd_bin="$(command -v dockerd || true)"
[[ -n "$dockerd_bin" ]] || dockerd_bin=/usr/sbin/dockerd
[[ -x "$dockerd_bin" ]] || dockerd_bin=/usr/bin/dockerd
if [[ ! -x "$dockerd_bin" ]]; then
  log "no dockerd binary found after installing docker.io"
  exit 3
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    log "starting docker.service"
    systemctl start docker.service || true
  fi
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  log "starting $dockerd_bin in the background (log: $LOG)"
  nohup "$dockerd_bin" >>"$LOG" 2>&1 </dev/null &
  disown || true
fi

for ((i = 0; i < WAIT_SECONDS; i++)); do
  if docker_answers; then
    log "docker daemon is ready ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within ${WAIT_SECONDS}s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 3
