"""Host code that misuses graph builders, leaf intrinsics and leaves (each on its marked line)."""
import hpvm_py as hpvm

from .common import incr, consume


def edge_in_host_code():
    hpvm.edge(None, None, hpvm.ONE_TO_ONE, 0, 0)  # ERR:host-edge


def node_in_host_code():
    return hpvm.node(consume, x=1)  # ERR:host-node


def bind_in_host_code():
    hpvm.bind_input(None, 0, 0)  # ERR:host-bind


def get_node_in_host_code():
    return hpvm.get_node()  # ERR:host-get-node


def barrier_in_host_code():
    hpvm.barrier()  # ERR:host-barrier


def call_leaf_in_host_code():
    return incr(3)  # ERR:host-leaf-call
