#!/bin/sh
# Run iptables in the backend the node uses (legacy or nft), chosen on first use the way
# kubernetes-sigs/iptables-wrappers and kind's entrypoint choose it: the backend that holds more
# rules, legacy on a tie. Installed as iptables, iptables-save, iptables-restore and the ip6tables
# ones; after the choice `update-alternatives` points those names at the real binaries and the
# call is run again, so the wrapper runs once per container.
set -eu
legacy=$( (iptables-legacy-save || true; ip6tables-legacy-save || true) 2>/dev/null | grep -c '^-' || true)
nft=$( (timeout 5 sh -c 'iptables-nft-save; ip6tables-nft-save' || true) 2>/dev/null | grep -c '^-' || true)
if [ "$legacy" -ge "$nft" ]; then mode=legacy; else mode=nft; fi
update-alternatives --set iptables "/usr/sbin/iptables-$mode" >/dev/null
update-alternatives --set ip6tables "/usr/sbin/ip6tables-$mode" >/dev/null
exec "$0" "$@"
