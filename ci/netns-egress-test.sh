#!/usr/bin/env bash
# Engine-free egress test (SPEC §15.6 item 2): loads the unchanged nftables/egress.nft into a
# network namespace made here and proves default-deny, the allowlist and that uid 10001 cannot
# change the rules, over IPv4 and IPv6, and that the DNS sets open port 53 only. Talks only to
# addresses inside the two namespaces it creates. About 15 s.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3  # uid 10001/10002 must be able to execute it (not a per-user build)

skip() { echo "SKIP: netns egress test: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root"
for tool in ip nft setpriv; do
    command -v "$tool" >/dev/null || skip "needs $tool (apt-get install iproute2 nftables util-linux)"
done
[ -x "$py" ] || skip "needs $py"

start=$(date +%s.%N)
suffix=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
ns_app="skmcp-app-$suffix"
ns_out="skmcp-out-$suffix"
veth_app="skA$suffix"   # interface names stay within 15 characters
veth_out="skO$suffix"
# A private /24 and a ULA /64 that exist only inside the two namespaces.
net=10.231.77
app_ip=$net.1
listen_ip=$net.2
other_ip=$net.3
net6=fd5c:4d50:e97e::
app_ip6=${net6}1
listen_ip6=${net6}2
other_ip6=${net6}3
port=8080
dns_port=53

work=$(mktemp -d)
chmod 755 "$work"
install -m 644 "$repo/appliance/egress-probe.py" "$work/egress-probe.py"
policy="$repo/nftables/egress.nft"
pids=()

cleanup() {
    local rc=$?
    set +e
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    ip netns del "$ns_app" 2>/dev/null
    ip netns del "$ns_out" 2>/dev/null
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { echo "FAIL: netns egress test: $*" >&2; exit 1; }
step() { echo "--- $*"; }

# drop UID: setpriv arguments for an unprivileged uid with no capabilities and no new privileges.
drop() { echo setpriv --reuid "$1" --regid "$1" --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs; }
probe_as_app() { ip netns exec "$ns_app" $(drop 10001) "$py" "$work/egress-probe.py" check "$@"; }

step "namespaces $ns_app and $ns_out, veth on $net.0/24 and ${net6}/64"
ip netns add "$ns_app"
ip netns add "$ns_out"
ip -n "$ns_app" link add "$veth_app" type veth peer name "$veth_out" netns "$ns_out"
ip -n "$ns_app" addr add "$app_ip/24" dev "$veth_app"
ip -n "$ns_out" addr add "$listen_ip/24" dev "$veth_out"
ip -n "$ns_out" addr add "$other_ip/24" dev "$veth_out"
# nodad: the addresses are usable at once, not after duplicate address detection.
ip -n "$ns_app" addr add "$app_ip6/64" dev "$veth_app" nodad
ip -n "$ns_out" addr add "$listen_ip6/64" dev "$veth_out" nodad
ip -n "$ns_out" addr add "$other_ip6/64" dev "$veth_out" nodad
# A stand-in resolver on port 53, served by uid 10002 like the rest.
ip netns exec "$ns_out" sysctl -q -w net.ipv4.ip_unprivileged_port_start="$dns_port"
for ns in "$ns_app" "$ns_out"; do ip -n "$ns" link set lo up; done
ip -n "$ns_app" link set "$veth_app" up
ip -n "$ns_out" link set "$veth_out" up

step "listeners in $ns_out as uid 10002 on port $port of $listen_ip, $other_ip, $listen_ip6, $other_ip6 and on $other_ip:$dns_port"
for where in "$listen_ip $port" "$other_ip $port" "$listen_ip6 $port" "$other_ip6 $port" "$other_ip $dns_port"; do
    set -- $where
    ip netns exec "$ns_out" $(drop 10002) "$py" "$work/egress-probe.py" serve --bind "$1" --port "$2" &
    pids+=($!)
done
v6_listen="[$listen_ip6]:$port"
v6_other="[$other_ip6]:$port"

step "no rules: every listener reachable from $ns_app as uid 10001"
probe_as_app --expect-uid 10001 "$listen_ip:$port=open" "$other_ip:$port=open" \
    "$v6_listen=open" "$v6_other=open" "$other_ip:$dns_port=open" || fail "listeners not reachable without rules (the test cannot see an open network)"

step "load the unchanged nftables/egress.nft"
ip netns exec "$ns_app" nft -f "$policy" || fail "policy did not load"

step "policy loaded, empty allowlist: blocked, loopback passes, uid 10001 cannot change rules"
ip -n "$ns_app" neigh flush all  # later connects must get neighbour discovery through the policy
probe_as_app --expect-uid 10001 --expect-nft-denied --loopback \
    "$listen_ip:$port=blocked" "$other_ip:$port=blocked" "$v6_listen=blocked" "$v6_other=blocked" \
    "$other_ip:$dns_port=blocked" || fail "default deny does not hold"

step "allow4 += $listen_ip: it opens, $other_ip stays blocked"
ip netns exec "$ns_app" nft add element inet skill_egress allow4 "{ $listen_ip }"
probe_as_app --expect-uid 10001 --expect-nft-denied --loopback \
    "$listen_ip:$port=open" "$other_ip:$port=blocked" "$v6_listen=blocked" || fail "allowlist does not hold"

step "allow6 += $listen_ip6: it opens (neighbour discovery passes), $other_ip6 stays blocked"
ip netns exec "$ns_app" nft add element inet skill_egress allow6 "{ $listen_ip6 }"
ip -n "$ns_app" neigh flush all
probe_as_app --loopback "$v6_listen=open" "$v6_other=blocked" || fail "IPv6 allowlist does not hold"

step "dns4 += $other_ip: its port $dns_port opens, its port $port stays blocked"
ip netns exec "$ns_app" nft add element inet skill_egress dns4 "{ $other_ip }"
probe_as_app "$other_ip:$dns_port=open" "$other_ip:$port=blocked" || fail "the DNS set does not hold"

step "reload the policy over itself: the sets are emptied, so all are blocked again"
ip netns exec "$ns_app" nft -f "$policy" || fail "policy did not load over itself"
probe_as_app --loopback "$listen_ip:$port=blocked" "$other_ip:$port=blocked" "$v6_listen=blocked" \
    "$other_ip:$dns_port=blocked" || fail "reload did not reset the allowlist"

awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "PASS: netns egress test (%.1f s)\n", e - s }'
