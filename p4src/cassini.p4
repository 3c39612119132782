/*
 * Cassini data plane for the v1model architecture (bmv2 simple_switch_grpc).
 *
 * One chip carved into logical switches: the table logical_forward maps
 * <ingress port, destination MAC> to an egress port of the same logical
 * switch. In egress, wred_profile gives each port its WRED thresholds; ECN
 * capable packets are CE-marked with a probability rising linearly from 0 at
 * min_cells to max_prob percent at max_cells of the egress queue depth, and
 * always above max_cells; packets that are not ECN capable are dropped where
 * they would have been marked. Per-port counters give the control plane the
 * ECN time series of every logical link.
 *
 * Per job: job_by_dst and job_by_src give a packet its job's class (0: no
 * job), and job_tx / job_ecn_marked count what each egress port sent, and
 * CE-marked, per class, at index egress_port * 16 + class. max_qdepth keeps
 * the deepest queue each egress port saw (enq_qdepth of every packet that
 * reached egress); its reader sets it back to 0 after each read, so each
 * value is the maximum over the reader's interval.
 *
 * (our choice) A job is known by its workers' sockets: every replica listens
 * on an address and TCP port unique in the run (emulation/jobs/launch.py:
 * worker i listens on 47000 + i), and one server may hold replicas of two
 * jobs, so host addresses alone cannot tell the jobs apart. The data of a
 * ring flows toward a listening socket (its destination) and the ACKs come
 * back from it (their source); the other end's port is an ephemeral one the
 * control plane cannot know. So the control plane writes one entry per
 * worker, (address, listening port) -> class, into both tables: a packet
 * is looked up by its destination first, then by its source. 16 classes (a
 * 4-bit class): class 0 is traffic of no job, so 15 jobs at once.
 *
 * Queue classes: bmv2 started with --priority-queues 8 serves 8 queues per
 * egress port by strict priority (7 first), chosen by standard_metadata.priority.
 * queue_class_by_flow (the 5-tuple of TCP/UDP over option-less IPv4), then
 * queue_class (the DSCP of any IPv4 packet) set it; a packet neither matches
 * stays in class 0. (our choice) Two exact tables instead of one ternary key:
 * a flow entry is more specific than a DSCP entry, so it wins, and exact keys
 * need no priorities from the control plane.
 *
 * bmv2 reports enq_qdepth in packets, not cells: the control plane converts
 * thresholds for bmv2 (controlplane/bmv2.py), and max_qdepth holds packets
 * there (the software switch and Tofino count 80-byte cells). Object names match
 * cassini.p4info.txtpb (checked by tests/controlplane/test_p4info_sync.py).
 *
 * @name gives every table, action and counter its P4Info name; @id pins its
 * P4Runtime id (p4c: type prefix << 24 | @id) so p4c reproduces
 * cassini.p4info.txtpb id for id (tests/controlplane/test_p4c.py checks).
 */
#include <core.p4>
#include <v1model.p4>

#include "include/headers.p4"
#include "include/parser.p4"

struct metadata_t {
    bit<1>  wred_enabled;
    bit<24> wred_min_cells;
    bit<24> wred_max_cells;
    bit<8>  wred_max_prob;
    bit<4>  job_class;
}

parser CassiniParser(packet_in pkt,
                     out headers_t hdr,
                     inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    EthernetIpv4Parser() ethernet_ipv4;

    state start {
        ethernet_ipv4.apply(pkt, hdr);
        transition accept;
    }
}

control CassiniVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control CassiniIngress(inout headers_t hdr,
                       inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {
    @name(".CassiniIngress.port_rx") @id(1)
    counter(512, CounterType.packets_and_bytes) port_rx;

    @name(".CassiniIngress.set_egress_port") @id(1)
    action set_egress_port(bit<9> port) {
        standard_metadata.egress_spec = port;
    }

    @name(".CassiniIngress.drop") @id(2)
    action drop() {
        mark_to_drop(standard_metadata);
    }

    @name(".CassiniIngress.logical_forward") @id(1)
    table logical_forward {
        key = {
            standard_metadata.ingress_port : exact @name("ingress_port");
            hdr.ethernet.dst_addr          : exact @name("dst_mac");
        }
        actions = {
            set_egress_port;
            drop;
        }
        const default_action = drop();
        // Every fabric one chip carries: at most 509 ports x 509 servers (p4src/README.md).
        size = 262144;
    }

    @name(".CassiniIngress.set_queue_class") @id(5)
    action set_queue_class(bit<3> queue_class) {
        standard_metadata.priority = queue_class;
    }

    @name(".CassiniIngress.queue_class") @id(5)
    table queue_class {
        key = {
            hdr.ipv4.dscp : exact @name("dscp");
        }
        actions = {
            set_queue_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 64;
    }

    @name(".CassiniIngress.queue_class_by_flow") @id(6)
    table queue_class_by_flow {
        key = {
            hdr.ipv4.src_addr : exact @name("src_addr");
            hdr.ipv4.dst_addr : exact @name("dst_addr");
            hdr.ipv4.protocol : exact @name("protocol");
            hdr.l4.src_port   : exact @name("src_port");
            hdr.l4.dst_port   : exact @name("dst_port");
        }
        actions = {
            set_queue_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 4096;
    }

    apply {
        port_rx.count((bit<32>)standard_metadata.ingress_port);
        if (hdr.ethernet.isValid()) {
            logical_forward.apply();
        } else {
            drop();
        }
        standard_metadata.priority = 0;
        if (hdr.ipv4.isValid()) {
            bool by_flow = false;
            if (hdr.l4.isValid()) {
                by_flow = queue_class_by_flow.apply().hit;
            }
            if (!by_flow) {
                queue_class.apply();
            }
        }
    }
}

control CassiniEgress(inout headers_t hdr,
                      inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".CassiniEgress.port_tx") @id(2)
    counter(512, CounterType.packets_and_bytes) port_tx;
    @name(".CassiniEgress.ecn_marked") @id(3)
    counter(512, CounterType.packets_and_bytes) ecn_marked;
    @name(".CassiniEgress.wred_dropped") @id(4)
    counter(512, CounterType.packets_and_bytes) wred_dropped;
    @name(".CassiniEgress.job_tx") @id(5)
    counter(8192, CounterType.packets_and_bytes) job_tx;
    @name(".CassiniEgress.job_ecn_marked") @id(6)
    counter(8192, CounterType.packets_and_bytes) job_ecn_marked;
    @name(".CassiniEgress.max_qdepth") @id(1)
    register<bit<32>>(512) max_qdepth;

    @name(".CassiniEgress.set_job_class") @id(4)
    action set_job_class(bit<4> job_class) {
        meta.job_class = job_class;
    }

    @name(".CassiniEgress.job_by_dst") @id(3)
    table job_by_dst {
        key = {
            hdr.ipv4.dst_addr : exact @name("dst_addr");
            hdr.l4.dst_port   : exact @name("dst_port");
        }
        actions = {
            set_job_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 1024;
    }

    @name(".CassiniEgress.job_by_src") @id(4)
    table job_by_src {
        key = {
            hdr.ipv4.src_addr : exact @name("src_addr");
            hdr.l4.src_port   : exact @name("src_port");
        }
        actions = {
            set_job_class;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 1024;
    }

    @name(".CassiniEgress.set_wred") @id(3)
    action set_wred(bit<24> min_cells, bit<24> max_cells, bit<8> max_prob) {
        meta.wred_enabled = 1;
        meta.wred_min_cells = min_cells;
        meta.wred_max_cells = max_cells;
        meta.wred_max_prob = max_prob;
    }

    @name(".CassiniEgress.wred_profile") @id(2)
    table wred_profile {
        key = {
            standard_metadata.egress_port : exact @name("egress_port");
        }
        actions = {
            set_wred;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        size = 512;
    }

    apply {
        bit<32> port_index = (bit<32>)standard_metadata.egress_port;
        meta.wred_enabled = 0;
        wred_profile.apply();

        meta.job_class = 0;
        if (hdr.l4.isValid()) {
            if (!job_by_dst.apply().hit) {
                job_by_src.apply();
            }
        }
        bit<32> job_index = (port_index << 4) | (bit<32>)meta.job_class;

        bit<32> deepest;
        max_qdepth.read(deepest, port_index);
        if ((bit<32>)standard_metadata.enq_qdepth > deepest) {
            max_qdepth.write(port_index, (bit<32>)standard_metadata.enq_qdepth);
        }

        bool congested = false;
        if (meta.wred_enabled == 1) {
            bit<32> depth = (bit<32>)standard_metadata.enq_qdepth;
            bit<32> min_depth = (bit<32>)meta.wred_min_cells;
            bit<32> max_depth = (bit<32>)meta.wred_max_cells;
            if (depth >= max_depth) {
                congested = true;
            } else if (depth > min_depth) {
                // P(mark) = max_prob/100 * (depth - min)/(max - min), exactly:
                // draw r uniformly in [0, 100 * (max - min)) and mark when
                // r < max_prob * (depth - min). bmv2 takes run-time bounds.
                bit<32> draw;
                random(draw, 32w0, 32w100 * (max_depth - min_depth) - 1);
                if (draw < (bit<32>)meta.wred_max_prob * (depth - min_depth)) {
                    congested = true;
                }
            }
        }

        if (congested) {
            if (hdr.ipv4.isValid() && (hdr.ipv4.ecn == ECN_ECT0 || hdr.ipv4.ecn == ECN_ECT1)) {
                hdr.ipv4.ecn = ECN_CE;
                ecn_marked.count(port_index);
                port_tx.count(port_index);
                job_ecn_marked.count(job_index);
                job_tx.count(job_index);
            } else if (hdr.ipv4.isValid() && hdr.ipv4.ecn == ECN_CE) {
                // Already marked upstream: nothing more to signal.
                port_tx.count(port_index);
                job_tx.count(job_index);
            } else {
                wred_dropped.count(port_index);
                mark_to_drop(standard_metadata);
            }
        } else {
            port_tx.count(port_index);
            job_tx.count(job_index);
        }
    }
}

control CassiniComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.dscp,
              hdr.ipv4.ecn,
              hdr.ipv4.total_len,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.frag_offset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.src_addr,
              hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control CassiniDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.l4);
    }
}

V1Switch(CassiniParser(),
         CassiniVerifyChecksum(),
         CassiniIngress(),
         CassiniEgress(),
         CassiniComputeChecksum(),
         CassiniDeparser()) main;
