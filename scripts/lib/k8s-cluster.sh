#!/usr/bin/env bash
# A real two-node Kubernetes cluster for Warren's `k8s` test tier, built from Debian's own
# `kubernetes` source package (v1.20.2 on bookworm) with etcd, containerd, runc and the CNI plugins
# from Debian. See docs/kubernetes.md and the recipe this follows.
#
#   scripts/lib/k8s-cluster.sh build   builds (or reuses) the binaries; prints their folder
#   scripts/lib/k8s-cluster.sh up      build + start the cluster (reuses a running one); prints the kubeconfig path
#   scripts/lib/k8s-cluster.sh down    stops everything this script started and removes the node netns
#   scripts/lib/k8s-cluster.sh status  exits 0 when the cluster answers with two Ready nodes
#   scripts/lib/k8s-cluster.sh load-image FILE [N...]   imports an image archive on both nodes (or on nodes N...)
#   scripts/lib/k8s-cluster.sh add-node N      adds an extra node N (3-9) of a test's own: its netns, containerd
#                                              and kubelet, tainted warren.dev/extra-node=nodeN:NoSchedule so
#                                              only pods that tolerate it land there; prints nothing
#   scripts/lib/k8s-cluster.sh kill-node N     makes extra node N go away: its link cut, then SIGKILL to its
#                                              kubelet, its pods' processes and its containerd (the Node object stays)
#   scripts/lib/k8s-cluster.sh remove-node N   removes extra node N entirely (processes, mounts, netns, Node object)
#
# Everything lives outside the checkout:
#   $WARREN_K8S_CACHE (default /var/cache/warren-k8s)/<debian-version>/bin   the build, keyed by package version
#   $WARREN_K8S_STATE (default /var/lib/warren-k8s)                           etcd data, containerd roots, logs, certs
# Needs root (containerd, kubelet, network namespaces) and Debian's apt.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cache_root=${WARREN_K8S_CACHE:-/var/cache/warren-k8s}
state=${WARREN_K8S_STATE:-/var/lib/warren-k8s}
# The test bridge and its addresses: only addresses this script creates are ever targeted.
bridge=wk8s0
bridge_net=10.231.0
node1_ip=$bridge_net.1
node2_ip=$bridge_net.2
node2_ns=wk8s-node2
pod_cidr1=10.232.1.0/24
pod_cidr2=10.232.2.0/24
service_cidr=10.233.0.0/24
api_port=16443
etcd_port=12379
# The default image, and a busybox (musl) one that shows the runtime injected into any image.
images=(warren/sandbox warren/test-busybox)
# Bumped when the build recipe changes, so a cached build of an older recipe is rebuilt (the Go cache stays).
recipe=2

k8s_version() {
  apt-cache showsrc kubernetes 2>/dev/null | awk '/^Version:/ { print $2; exit }'
}

ensure_deb_src() {
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    step "Adding deb-src for Debian's archive (the kubernetes source package)"
    cat >/etc/apt/sources.list.d/warren-k8s-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    with_apt_lock apt-get update -qq || die "apt-get update failed"
    step_done
  fi
}

ensure_packages() {
  local missing=() p
  for p in golang-1.19-go golang-github-modern-go-reflect2-dev rsync etcd-server containerd runc containernetworking-plugins iproute2 openssl gcc util-linux; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# Builds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet as Debian's rules do.
# The build tree (about 2.3 GB with Go caches) stays in the cache, never in the checkout.
build() {
  is_root || die "building the test cluster needs root (apt, containerd, network namespaces)"
  ensure_deb_src
  ensure_packages
  local version dir
  version=$(k8s_version)
  [[ -n $version ]] || die "apt-cache showsrc kubernetes found nothing; is deb-src configured?"
  dir=$cache_root/$version
  if [[ $(cat "$dir/bin/.recipe" 2>/dev/null) == "$recipe" && -x $dir/bin/kube-apiserver && -x $dir/bin/kubelet ]]; then
    printf '%s\n' "$dir/bin"
    return 0
  fi
  step "Building Kubernetes $version from Debian's source package into $dir (about 5 minutes on 2 cores)"
  mkdir -p "$dir/src"
  (cd "$dir/src" && { ls kubernetes_*.orig*.tar.* >/dev/null 2>&1 || with_apt_lock apt-get source --download-only -qq kubernetes; }) \
    || die "apt-get source kubernetes failed"
  local tree
  tree=$(find "$dir/src" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)
  if [[ -z $tree ]]; then
    (cd "$dir/src" && dpkg-source -x --no-check kubernetes_*.dsc >/dev/null) || die "dpkg-source -x failed"
    tree=$(find "$dir/src" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)
  fi
  # Kubernetes 1.20 vendors reflect2 v1.0.1, whose map iteration calls the runtime with the
  # pre-Go-1.18 signature: built with Go 1.19 the API server dies within a minute ("unexpected fault
  # address" in mapiternext). Debian's reflect2 1.0.2 has the fix; it replaces the vendored copy.
  rsync -a --delete /usr/share/gocode/src/github.com/modern-go/reflect2/ "$tree/vendor/github.com/modern-go/reflect2/"
  mkdir -p "$dir/gopath/src/k8s.io"
  ln -sfn "$tree" "$dir/gopath/src/k8s.io/kubernetes"
  (
    cd "$dir/gopath/src/k8s.io/kubernetes"
    export PATH=/usr/lib/go-1.19/bin:$PATH GOPATH=$dir/gopath GOCACHE=$dir/gocache GO111MODULE=auto GOFLAGS=-mod=vendor CGO_ENABLED=0
    export KUBE_GIT_TREE_STATE=clean KUBE_GIT_VERSION=v${version%%[-+]*} KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubelet"
  ) >"$dir/build.log" 2>&1 || die "the Kubernetes build failed; see $dir/build.log"
  mkdir -p "$dir/bin"
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    cp "$tree/_output/local/bin/linux/amd64/$b" "$dir/bin/$b" 2>/dev/null \
      || cp "$(find "$tree/_output" -type f -name "$b" | head -1)" "$dir/bin/$b" || die "no $b after the build"
  done
  echo "$recipe" >"$dir/bin/.recipe"
  step_done "built"
  printf '%s\n' "$dir/bin"
}

# A docker-archive (what `docker save` writes and `ctr images import` reads) of one folder as one
# layer: enough for the pause image and needs no registry and no Docker build.
image_archive() {
  local tag=$1 rootfs=$2 out=$3 entrypoint=$4 work
  work=$(mktemp -d)
  tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$work/layer.tar" .
  local diff config_sha
  diff=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["%s"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$diff" >"$work/config.json"
  config_sha=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_sha" "$tag" >"$work/manifest.json"
  tar -C "$work" -cf "$out" manifest.json "$config_sha.json" layer.tar
  rm -rf "$work"
}

# The pod sandbox ("pause") image: a static program that reaps children and waits for a signal.
pause_image() {
  local out=$state/images/pause.tar
  [[ -f $out ]] && return 0
  mkdir -p "$state/images/pause-root"
  cat >"$state/images/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
C
  gcc -static -Os -o "$state/images/pause-root/pause" "$state/images/pause.c" || die "could not build the pause program (gcc, libc6-dev)"
  image_archive warren.local/pause:1 "$state/images/pause-root" "$out" /pause
}

# cgroup v1: kubelet's --cgroup-root must exist in every hierarchy.
cgroup_root() {
  local name=$1 h
  for h in /sys/fs/cgroup/*/; do
    [[ -L ${h%/} ]] && continue
    mkdir -p "$h$name" 2>/dev/null || true
  done
}

running() { [[ -f $state/run/$1.pid ]] && kill -0 "$(cat "$state/run/$1.pid")" 2>/dev/null; }

# Starts a daemon in the background once, with its pid and log in the state folder.
daemon() {
  local name=$1
  shift
  running "$name" && return 0
  mkdir -p "$state/run" "$state/log"
  setsid "$@" >"$state/log/$name.log" 2>&1 </dev/null &
  echo $! >"$state/run/$name.pid"
}

# Runs in node 2's network namespace (nsenter keeps /sys and the cgroup mounts, `ip netns exec` does not).
in_node2() { nsenter --net="/run/netns/$node2_ns" "$@"; }

network() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$node1_ip/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  if [[ ! -e /run/netns/$node2_ns ]]; then
    ip netns add "$node2_ns"
    ip link add wk8s-n2h type veth peer name wk8s-n2
    ip link set wk8s-n2h master "$bridge" up
    ip link set wk8s-n2 netns "$node2_ns"
    ip -n "$node2_ns" addr add "$node2_ip/24" dev wk8s-n2
    ip -n "$node2_ns" link set wk8s-n2 up
    ip -n "$node2_ns" link set lo up
    ip -n "$node2_ns" route add default via "$node1_ip"
  fi
  ip route replace "$pod_cidr2" via "$node2_ip" dev "$bridge"
  ip -n "$node2_ns" route replace "$pod_cidr1" via "$node1_ip" 2>/dev/null || true
  sysctl -qw net.ipv4.ip_forward=1
  in_node2 sysctl -qw net.ipv4.ip_forward=1
}

certs() {
  local dir=$state/pki
  [[ -f $dir/tokens.csv ]] && return 0
  mkdir -p "$dir"
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=warren-k8s-apiserver" \
    -addext "subjectAltName=IP:$node1_ip,IP:127.0.0.1,IP:${service_cidr%.0/24}.1" -keyout "$dir/apiserver.key" -out "$dir/apiserver.crt" 2>/dev/null
  # Static tokens: an admin (system:masters), a non-admin for RBAC tests, and one per kubelet.
  {
    printf '%s,admin,admin,system:masters\n' "$(openssl rand -hex 16)"
    printf '%s,warren-tester,warren-tester\n' "$(openssl rand -hex 16)"
    printf '%s,system:node:node1,kubelet-node1,system:nodes\n' "$(openssl rand -hex 16)"
    printf '%s,system:node:node2,kubelet-node2,system:nodes\n' "$(openssl rand -hex 16)"
  } >"$dir/tokens.csv"
  chmod 600 "$dir/tokens.csv" "$dir/sa.key" "$dir/apiserver.key"
}

token_of() { awk -F, -v u="$1" '$2 == u { print $1 }' "$state/pki/tokens.csv"; }

kubeconfig() {
  local user=$1 out=$2 token=${3:-}
  [[ -n $token ]] || token=$(token_of "$user")
  cat >"$out" <<KC
apiVersion: v1
kind: Config
clusters:
- name: warren-test
  cluster:
    server: https://$node1_ip:$api_port
    certificate-authority-data: $(base64 -w0 "$state/pki/apiserver.crt")
users:
- name: $user
  user:
    token: $token
contexts:
- name: $user
  context: { cluster: warren-test, user: $user }
current-context: $user
KC
  chmod 600 "$out"
}

containerd_config() {
  local n=$1 cidr=$2 dir=$state/node$1
  mkdir -p "$dir/cni/net.d" "$dir/root" "$dir/state"
  cat >"$dir/containerd.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "warren.local/pause:1"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
TOML
  cat >"$dir/cni/net.d/10-warren.conflist" <<CNI
{ "cniVersion": "0.4.0", "name": "warren-node$n", "plugins": [
  { "type": "bridge", "bridge": "wk8s-cni$n", "isGateway": true, "ipMasq": false,
    "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$cidr" }]], "routes": [{ "dst": "0.0.0.0/0" }],
              "dataDir": "$dir/cni/ipam" } },
  { "type": "loopback" } ] }
CNI
}

kubelet_config() {
  local n=$1 ip=$2 dir=$state/node$1
  # An extra node of a running cluster has no token of its own (the API server reads its token
  # file at start): it registers with the admin's, so NodeRestriction does not bind it.
  local token
  token=$(token_of "system:node:node$n")
  [[ -n $token ]] || token=$(token_of admin)
  kubeconfig "system:node:node$n" "$dir/kubelet.kubeconfig" "$token"
  cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
cgroupDriver: cgroupfs
cgroupRoot: /warren-k8s-node$n
authentication: { anonymous: { enabled: true }, webhook: { enabled: false } }
authorization: { mode: AlwaysAllow }
failSwapOn: false
resolvConf: ""
podPidsLimit: 1024
evictionHard: { "memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%" }
imageGCHighThresholdPercent: 100
YAML
}

load_images() {
  local n=$1 sock=$state/node$1/containerd.sock img
  ctr -a "$sock" -n k8s.io images import "$state/images/pause.tar" >/dev/null
  for img in "${images[@]}"; do
    local file=$state/images/${img//\//_}.tar id
    id=$(docker image inspect --format '{{.Id}}' "$img:latest" 2>/dev/null) || { printf 'note: image %s is not on Docker; skipped\n' "$img" >&2; continue; }
    if [[ ! -f $file.$id ]]; then
      rm -f "$file".*
      docker save -o "$file.$id" "$img:latest"
    fi
    [[ -f $state/node$n/.loaded.${img//\//_}.$id ]] && continue
    ctr -a "$sock" -n k8s.io images import "$file.$id" >/dev/null
    touch "$state/node$n/.loaded.${img//\//_}.$id"
  done
}

wait_for() {
  local what=$1 tries=$2
  shift 2
  for ((i = 0; i < tries; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "$what did not come up; see $state/log/"
}

admin_api() { curl -sk -H "Authorization: Bearer $(token_of admin)" "https://$node1_ip:$api_port$1"; }

status() {
  [[ -f $state/pki/tokens.csv ]] || return 1
  local nodes leases
  nodes=$(admin_api /api/v1/nodes 2>/dev/null) || return 1
  leases=$(admin_api /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases 2>/dev/null) || return 1
  # Ready, and a node lease renewed in the last 40 s: a Ready condition left in etcd by a cluster
  # that was stopped does not count (kubelets renew their lease every 10 s).
  NODES=$nodes LEASES=$leases node -e '
    try {
      const nodes = JSON.parse(process.env.NODES).items ?? [];
      const leases = JSON.parse(process.env.LEASES).items ?? [];
      const renewed = new Set(leases.filter((l) => Date.now() - Date.parse(l.spec.renewTime) < 40000).map((l) => l.metadata.name));
      const ready = nodes.filter((n) => renewed.has(n.metadata.name) && n.status.conditions.some((c) => c.type === "Ready" && c.status === "True"));
      process.exit(ready.length >= 2 ? 0 : 1);
    } catch { process.exit(1); }' 2>/dev/null
}

up() {
  local bin
  bin=$(build)
  if status; then
    printf '%s\n' "$state/admin.kubeconfig"
    return 0
  fi
  step "Starting the test cluster (state in $state)"
  mkdir -p "$state"
  network
  certs
  pause_image
  daemon etcd etcd --name warren-test --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
    --initial-cluster warren-test=http://127.0.0.1:12380
  wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"
  daemon apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$node1_ip" --advertise-address "$node1_ip" --secure-port "$api_port" \
    --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
    --token-auth-file "$state/pki/tokens.csv" --authorization-mode Node,RBAC \
    --service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
    --service-account-issuer https://warren-test.invalid --service-cluster-ip-range "$service_cidr" \
    --kubelet-preferred-address-types InternalIP --allow-privileged=false \
    --enable-admission-plugins NodeRestriction,ServiceAccount,LimitRanger,ResourceQuota
  wait_for kube-apiserver 90 admin_api /readyz
  kubeconfig admin "$state/admin.kubeconfig"
  kubeconfig warren-tester "$state/tester.kubeconfig"
  daemon controller-manager "$bin/kube-controller-manager" --kubeconfig "$state/admin.kubeconfig" \
    --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/apiserver.crt" \
    --use-service-account-credentials=false --controllers '*,-nodeipam' --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --port 0
  daemon scheduler "$bin/kube-scheduler" --kubeconfig "$state/admin.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --port 0
  local n ip cidr
  for n in 1 2; do
    if ((n == 1)); then ip=$node1_ip cidr=$pod_cidr1; else ip=$node2_ip cidr=$pod_cidr2; fi
    containerd_config "$n" "$cidr"
    kubelet_config "$n" "$ip"
    cgroup_root "warren-k8s-node$n"
    local wrap=()
    ((n == 2)) && wrap=(nsenter --net="/run/netns/$node2_ns")
    daemon "containerd$n" "${wrap[@]}" containerd --config "$state/node$n/containerd.toml"
    wait_for "containerd of node $n" 30 ctr -a "$state/node$n/containerd.sock" version
    load_images "$n"
    daemon "kubelet$n" "${wrap[@]}" "$bin/kubelet" --config "$state/node$n/kubelet.yaml" --kubeconfig "$state/node$n/kubelet.kubeconfig" \
      --container-runtime remote --container-runtime-endpoint "unix://$state/node$n/containerd.sock" \
      --hostname-override "node$n" --node-ip "$ip" --node-labels "warren.dev/test-node=node$n" \
      --root-dir "$state/node$n/kubelet" --cert-dir "$state/node$n/pki" --pod-cidr "$cidr"
  done
  wait_for "two Ready nodes" 120 status
  step_done "two nodes Ready"
  printf '%s\n' "$state/admin.kubeconfig"
}

down() {
  local name n task
  for name in kubelet2 kubelet1; do
    if running "$name"; then kill "$(cat "$state/run/$name.pid")" 2>/dev/null || true; fi
  done
  # The pods' processes outlive containerd (their shims stay): kill this cluster's tasks first.
  for n in 1 2; do
    [[ -S $state/node$n/containerd.sock ]] || continue
    for task in $(ctr -a "$state/node$n/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$state/node$n/containerd.sock" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  done
  sleep 1
  for name in kubelet2 kubelet1 scheduler controller-manager apiserver containerd2 containerd1 etcd; do
    if running "$name"; then kill "$(cat "$state/run/$name.pid")" 2>/dev/null || true; fi
    rm -f "$state/run/$name.pid"
  done
  sleep 2
  # What the kubelets and containerds mounted below the state folder (emptyDirs, overlay roots).
  findmnt -rn -o TARGET | grep "^$state/" | sort -r | while read -r target; do umount -l "$target" 2>/dev/null || true; done
  ip netns del "$node2_ns" 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
}

# Imports an image archive (docker-archive or OCI) into both nodes' containerd (or the nodes named).
load_image() {
  local file=$1 n
  shift
  [[ -f $file ]] || die "no image archive at $file"
  local nodes=("$@")
  ((${#nodes[@]})) || nodes=(1 2)
  for n in "${nodes[@]}"; do
    ctr -a "$state/node$n/containerd.sock" -n k8s.io images import "$file" >/dev/null || die "could not import $file on node $n"
  done
}

# Extra nodes (3-9) for tests that take a node away (test/k8s/node-loss.test.ts): each in its own
# network namespace wk8s-nodeN at 10.231.0.N with pods in 10.232.N.0/24, and tainted so that only
# pods that tolerate warren.dev/extra-node land there; the tier's two nodes are never touched.
extra_node() {
  [[ $1 =~ ^[3-9]$ ]] || die "extra nodes are numbered 3 to 9 (1 and 2 are the tier's own), got '$1'"
}

add_node() {
  local n=$1
  extra_node "$n"
  status || die "the cluster is not running (scripts/lib/k8s-cluster.sh up)"
  local bin ip=$bridge_net.$n cidr=10.232.$n.0/24 ns=wk8s-node$n
  bin=$(build)
  if [[ ! -e /run/netns/$ns ]]; then
    ip netns add "$ns"
    ip link add "wk8s-n${n}h" type veth peer name "wk8s-n$n"
    ip link set "wk8s-n${n}h" master "$bridge" up
    ip link set "wk8s-n$n" netns "$ns"
    ip -n "$ns" addr add "$ip/24" dev "wk8s-n$n"
    ip -n "$ns" link set "wk8s-n$n" up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$node1_ip"
  fi
  ip link set "wk8s-n${n}h" up 2>/dev/null || true
  ip route replace "$cidr" via "$ip" dev "$bridge"
  nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1
  containerd_config "$n" "$cidr"
  kubelet_config "$n" "$ip"
  cgroup_root "warren-k8s-node$n"
  daemon "containerd$n" nsenter --net="/run/netns/$ns" containerd --config "$state/node$n/containerd.toml"
  wait_for "containerd of node $n" 30 ctr -a "$state/node$n/containerd.sock" version
  load_images "$n"
  daemon "kubelet$n" nsenter --net="/run/netns/$ns" "$bin/kubelet" --config "$state/node$n/kubelet.yaml" --kubeconfig "$state/node$n/kubelet.kubeconfig" \
    --container-runtime remote --container-runtime-endpoint "unix://$state/node$n/containerd.sock" \
    --hostname-override "node$n" --node-ip "$ip" --node-labels "warren.dev/test-node=node$n" \
    --register-with-taints "warren.dev/extra-node=node$n:NoSchedule" \
    --root-dir "$state/node$n/kubelet" --cert-dir "$state/node$n/pki" --pod-cidr "$cidr"
  wait_for "node $n Ready" 120 node_ready "node$n"
}

node_ready() {
  admin_api "/api/v1/nodes/$1" | node -e '
    let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
      try { process.exit(JSON.parse(s).status.conditions.some((c) => c.type === "Ready" && c.status === "True") ? 0 : 1); } catch { process.exit(1); }
    });'
}

# Kills a pid file's process with SIGKILL (a node that loses power says nothing to anyone).
kill_hard() { if running "$1"; then kill -9 "$(cat "$state/run/$1.pid")" 2>/dev/null || true; fi; }

# The processes of node N's pods: each container's shim (found by the node's containerd socket in
# its command line) and everything below it.
node_pod_pids() {
  local shim
  for shim in $(pgrep -f -- "-address $state/node$1/containerd.sock" || true); do
    printf '%s\n' "$shim"
    pgrep -g "$(ps -o pgid= -p "$shim" | tr -d ' ')" 2>/dev/null || true
    ps -o pid= --ppid "$shim" 2>/dev/null || true
  done
}

kill_node() {
  local n=$1 pid
  extra_node "$n"
  # The link first, as with a node that loses power: nothing it ran says goodbye (no FIN, no RST).
  ip link set "wk8s-n${n}h" down 2>/dev/null || true
  kill_hard "kubelet$n"
  # The containers keep running under their shims when containerd dies: kill them first, then
  # containerd (SIGKILL to the whole process tree of each shim).
  if [[ -S $state/node$n/containerd.sock ]]; then
    for task in $(ctr -a "$state/node$n/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$state/node$n/containerd.sock" -n k8s.io tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
  fi
  for pid in $(node_pod_pids "$n"); do kill -9 "$pid" 2>/dev/null || true; done
  kill_hard "containerd$n"
}

remove_node() {
  local n=$1
  extra_node "$n"
  kill_node "$n"
  rm -f "$state/run/kubelet$n.pid" "$state/run/containerd$n.pid"
  sleep 1
  findmnt -rn -o TARGET | grep "^$state/node$n/" | sort -r | while read -r target; do umount -l "$target" 2>/dev/null || true; done
  ip route del "10.232.$n.0/24" 2>/dev/null || true
  ip link del "wk8s-n${n}h" 2>/dev/null || true
  ip netns del "wk8s-node$n" 2>/dev/null || true
  curl -sk -X DELETE -H "Authorization: Bearer $(token_of admin)" "https://$node1_ip:$api_port/api/v1/nodes/node$n" >/dev/null || true
  local h
  for h in /sys/fs/cgroup/*/warren-k8s-node"$n"; do [[ -d $h ]] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -rf "${state:?}/node$n"
}

case ${1:-} in
  build) build ;;
  load-image) load_image "${2:?usage: load-image FILE [N...]}" "${@:3}" ;;
  add-node) add_node "${2:?usage: add-node N}" ;;
  kill-node) kill_node "${2:?usage: kill-node N}" ;;
  remove-node) remove_node "${2:?usage: remove-node N}" ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *) printf 'usage: %s build|up|down|status|load-image FILE [N...]|add-node N|kill-node N|remove-node N\n' "$0" >&2; exit 2 ;;
esac
