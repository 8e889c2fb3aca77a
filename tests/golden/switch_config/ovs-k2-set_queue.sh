#!/bin/sh
# LEVELLER: 2 strict-priority levels on Open vSwitch ports eth1, eth2
# rendered by: leveller switch-config --vendor ovs --levels 2 --ports eth1,eth2 --queue-mode set_queue --bridge br-fabric
# level -> DSCP -> queue, from leveller.core.qos (the SDN app's map); HTB class and priority:
#   level 1 (highest): DSCP 8 -> queue 1 -> HTB class 1:2, priority 1
#   level 0 (lowest): DSCP 0 -> queue 0 -> HTB class 1:1, priority 2
#   TCP's control packets (ACKs; TCP shorter than 128 bytes): queue 2 -> HTB class 1:3, priority 0, min-rate 12000 bit/s (only the tc classifiers fill it: set_queue cannot match a length)
# the 62 other DSCP values (unmarked traffic included) -> queue 0, the lowest
# run as root on the switch; ovs-vsctl uses the local database (set OVS_RUNDIR or add --db=...)
set -e

# 1. strict-priority queues (OVSDB QoS linux-htb, ovs-vswitchd.conf.db(5)); ceiling: left to OVS (link rate, else 10 Gbit/s)
ovs-vsctl -- set Port eth1 qos=@qos0 -- --id=@qos0 create QoS type=linux-htb queues:0=@qos0_0 queues:1=@qos0_1 queues:2=@qos0_2 -- --id=@qos0_0 create Queue other-config:min-rate=12000 other-config:priority=2 -- --id=@qos0_1 create Queue other-config:min-rate=12000 other-config:priority=1 -- --id=@qos0_2 create Queue other-config:min-rate=12000 other-config:priority=0
ovs-vsctl -- set Port eth2 qos=@qos1 -- --id=@qos1 create QoS type=linux-htb queues:0=@qos1_0 queues:1=@qos1_1 queues:2=@qos1_2 -- --id=@qos1_0 create Queue other-config:min-rate=12000 other-config:priority=2 -- --id=@qos1_1 create Queue other-config:min-rate=12000 other-config:priority=1 -- --id=@qos1_2 create Queue other-config:min-rate=12000 other-config:priority=0

# 2. DSCP -> queue: OpenFlow set_queue in table 0 of bridge br-fabric, then the SDN app's path table 1;
#    `leveller sdn --queue-mode set_queue` installs these itself when the switch connects
ovs-ofctl -O OpenFlow13 add-flow br-fabric cookie=0x8000000000000000,table=0,priority=100,eth_type=0x0800,ip_dscp=0,actions=set_queue:0,goto_table:1
ovs-ofctl -O OpenFlow13 add-flow br-fabric cookie=0x8000000000000000,table=0,priority=100,eth_type=0x86dd,ip_dscp=0,actions=set_queue:0,goto_table:1
ovs-ofctl -O OpenFlow13 add-flow br-fabric cookie=0x8000000000000000,table=0,priority=100,eth_type=0x0800,ip_dscp=8,actions=set_queue:1,goto_table:1
ovs-ofctl -O OpenFlow13 add-flow br-fabric cookie=0x8000000000000000,table=0,priority=100,eth_type=0x86dd,ip_dscp=8,actions=set_queue:1,goto_table:1
ovs-ofctl -O OpenFlow13 add-flow br-fabric cookie=0x8000000000000000,table=0,priority=0,actions=goto_table:1
