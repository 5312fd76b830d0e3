#!/bin/bash
# A wanopt edge in a cgroup v1 CPU group of shares 10240 (cgroup v2 weight 1000, the systemd slice's), for an A/B of the weight.
# 'ip netns exec' gives the edge a fresh /sys without the cgroup mounts: mount the cpu hierarchy to join the group.
m=$(mktemp -d /tmp/abw-mnt.XXXX)
if mount -t cgroup -o cpu none $m; then
	d=$m/wanopt-abw-$$
	mkdir -p $d && echo 10240 > $d/cpu.shares && echo $$ > $d/cgroup.procs
	umount -l $m
fi
rmdir $m
exec /tmp/me/s44/head/wanopt "$@"
