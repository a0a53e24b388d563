#!/usr/bin/env bash
# Real ibnetdiscover / iblinkinfo output from a simulated InfiniBand fabric.
#
# usage: capture.sh NETFILE OUTPREFIX
# needs (Debian): ibsim-utils infiniband-diags opensm
# Starts ibsim on NETFILE, runs OpenSM under umad2sim until "SUBNET UP", then writes
# OUTPREFIX.ibnetdiscover.txt, OUTPREFIX.ibnetdiscover-p.txt and OUTPREFIX.iblinkinfo.txt.
# Net-file syntax and the simulator's quirks: tests/fixtures/ibnetdiscover/README.md
set -u
net=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
so=$(find /usr/lib -path "*/umad2sim/libumad2sim.so" -print -quit)
w=$(mktemp -d)
ibsim -s -n "$net" >"$w/ibsim.log" 2>&1 &
sim=$!
sleep 2
kill -0 $sim 2>/dev/null || { cat "$w/ibsim.log"; exit 1; }
export OSM_TMP_DIR=$w OSM_CACHE_DIR=$w
sed "s#/tmp/osm-dump#$w/dump#g" "$here/opensm-sim.conf" >"$w/sim.conf"
LD_PRELOAD=$so opensm -F "$w/sim.conf" -f "$w/osm.log" >"$w/osm.stdout" 2>&1 &
osm=$!
for _ in $(seq 1 60); do grep -q "SUBNET UP" "$w/osm.log" 2>/dev/null && break; sleep 1; done
grep -q "SUBNET UP" "$w/osm.log" || echo "warning: the subnet manager never reported SUBNET UP" >&2
sleep 2
{
  LD_PRELOAD=$so timeout 120 ibnetdiscover >"$out.ibnetdiscover.txt"
  LD_PRELOAD=$so timeout 120 ibnetdiscover -p >"$out.ibnetdiscover-p.txt"
  LD_PRELOAD=$so timeout 120 iblinkinfo >"$out.iblinkinfo.txt"
} 2>>"$w/err"
kill $osm; wait $osm 2>/dev/null
kill $sim; wait $sim 2>/dev/null
rm -rf "$w"
