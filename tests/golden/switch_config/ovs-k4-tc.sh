#!/bin/sh
# LEVELLER: 4 strict-priority levels on Open vSwitch ports s1-p1
# rendered by: leveller switch-config --vendor ovs --levels 4 --ports s1-p1 --rate-mbps 50 --queue-mode tc
# level -> DSCP -> queue, from leveller.core.qos (the SDN app's map); HTB class and priority:
#   level 3 (highest): DSCP 24 -> queue 3 -> HTB class 1:4, priority 1
#   level 2: DSCP 16 -> queue 2 -> HTB class 1:3, priority 2
#   level 1: DSCP 8 -> queue 1 -> HTB class 1:2, priority 3
#   level 0 (lowest): DSCP 0 -> queue 0 -> HTB class 1:1, priority 4
#   TCP's control packets (ACKs; TCP shorter than 128 bytes): queue 4 -> HTB class 1:5, priority 0, min-rate 2500000 bit/s
# the 60 other DSCP values (unmarked traffic included) -> queue 0, the lowest
# run as root on the switch; ovs-vsctl uses the local database (set OVS_RUNDIR or add --db=...)
set -e

# 1. strict-priority queues (OVSDB QoS linux-htb, ovs-vswitchd.conf.db(5)); ceiling: 50 Mbit/s
ovs-vsctl -- set Port s1-p1 qos=@qos0 -- --id=@qos0 create QoS type=linux-htb other-config:max-rate=50000000 queues:0=@qos0_0 queues:1=@qos0_1 queues:2=@qos0_2 queues:3=@qos0_3 queues:4=@qos0_4 -- --id=@qos0_0 create Queue other-config:min-rate=50000 other-config:max-rate=50000000 other-config:burst=500000 other-config:priority=4 -- --id=@qos0_1 create Queue other-config:min-rate=50000 other-config:max-rate=50000000 other-config:burst=500000 other-config:priority=3 -- --id=@qos0_2 create Queue other-config:min-rate=50000 other-config:max-rate=50000000 other-config:burst=500000 other-config:priority=2 -- --id=@qos0_3 create Queue other-config:min-rate=50000 other-config:max-rate=50000000 other-config:burst=500000 other-config:priority=1 -- --id=@qos0_4 create Queue other-config:min-rate=2500000 other-config:max-rate=50000000 other-config:burst=500000 other-config:priority=0

# 2. DSCP -> queue: tc u32 classifiers on the HTB OVS created (the userspace datapath ignores
#    set_queue), and the HTB root's burst widened to the queues' (OVS gives it one MTU: a late
#    dequeue would lose link time); OVS rebuilds the qdisc when ovs-vswitchd restarts and resets
#    the root's burst on every reconfiguration: `leveller sdn --queue-mode tc` redoes both every
#    second, else run this part again
tc filter del dev s1-p1 parent 1: 2>/dev/null || true
tc filter add dev s1-p1 parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff match u16 0x0000 0xff80 at 2 flowid 1:5
tc filter add dev s1-p1 parent 1: protocol ipv6 prio 2 u32 match ip6 protocol 6 0xff match u16 0x0000 0xff80 at 4 flowid 1:5
tc filter add dev s1-p1 parent 1: protocol ip prio 3 u32 match ip dsfield 0x00 0xfc flowid 1:1
tc filter add dev s1-p1 parent 1: protocol ip prio 4 u32 match ip dsfield 0x20 0xfc flowid 1:2
tc filter add dev s1-p1 parent 1: protocol ip prio 5 u32 match ip dsfield 0x40 0xfc flowid 1:3
tc filter add dev s1-p1 parent 1: protocol ip prio 6 u32 match ip dsfield 0x60 0xfc flowid 1:4
tc filter add dev s1-p1 parent 1: protocol ipv6 prio 7 u32 match ip6 priority 0x00 0xfc flowid 1:1
tc filter add dev s1-p1 parent 1: protocol ipv6 prio 8 u32 match ip6 priority 0x20 0xfc flowid 1:2
tc filter add dev s1-p1 parent 1: protocol ipv6 prio 9 u32 match ip6 priority 0x40 0xfc flowid 1:3
tc filter add dev s1-p1 parent 1: protocol ipv6 prio 10 u32 match ip6 priority 0x60 0xfc flowid 1:4
tc class change dev s1-p1 parent 1: classid 1:fffe htb rate 50000000bit ceil 50000000bit burst 62500 cburst 62500 mpu 60
