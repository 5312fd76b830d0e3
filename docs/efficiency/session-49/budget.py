#!/usr/bin/env python3
"""Where each edge's CPU goes, by cause, in CPU-seconds per GB.

Usage: budget.py LABEL=DIR [LABEL=DIR ...]

Each DIR holds one `wanbench cisco` command's cisco.json (one row) and, for
each edge, the text of `perf script -F ip,sym,dso -i EDGE.perf` as near.script
and far.script, where EDGE.perf is `perf record -g -p <edge pid> -- sleep 10`
taken during the command's measured runs. Every sample is put in one class by
its call chain (rules below, first match wins); a class's share of the samples
times the command's CPU-seconds per GB for that edge is its CPU-seconds per GB.
The command's figure includes perf's own cost (a few per cent).

This guest has no PMU: samples are cpu-clock interrupts, and one that falls
while interrupts are off is taken when they are re-enabled (pvm_irq_enable),
so the rules look at the whole chain, not only the leaf.
"""
import collections
import json
import re
import sys

AEAD = re.compile(r'crypto/internal/fips140/aes|crypto/cipher|chacha|poly1305')
COPIES = {'runtime.memmove', 'runtime.memclrNoHeapPointers', 'csum_partial_copy_generic', '_copy_from_iter',
          '_copy_to_iter', 'copy_user_generic', 'rep_movs_alternative', 'copy_page_from_iter',
          'copy_page_to_iter', 'memcpy', 'memset', 'clear_page_erms'}
SYSCALLS = (('__sys_sendmmsg', 'sendmmsg'), ('do_recvmmsg', 'recvmmsg'), ('do_writev', 'writev (TUN)'),
            ('do_readv', 'readv'), ('ksys_read', 'read'),
            ('do_epoll_wait', 'epoll_pwait'), ('do_epoll_ctl', 'epoll_ctl'),
            ('do_timerfd_settime', 'timerfd_settime'))


def classify(chain, kernel):
    """chain: the sample's symbols, leaf first; kernel: whether the leaf is
    in the kernel (its dso is [kernel.kallsyms])."""
    leaf, s = chain[0], set(chain)
    if leaf == 'pvm_write_msr' or 'smp_call_function_single_async' in s:
        return 'lab: IPI to the CPU that allocated a received packet (the link emulator\'s; skb defer free)'
    if s & {'finish_task_switch.isra.0', 'finish_task_switch'}:
        if s & {'schedule_hrtimeout_range_clock', 'do_epoll_wait', 'futex_do_wait', 'futex_wait', 'do_nanosleep'}:
            return 'context switch: the edge waits (Go poller, futex, sysmon sleep)'
        return 'context switch: preempted (another thread took the CPU)'
    if s & {'sock_def_readable', 'try_to_wake_up', 'ep_poll_callback', '__wake_up_sync_key', '__wake_up'}:
        if 'tun_net_xmit' in s:
            return 'lab: waking the link emulator (a packet into its TUN)'
        if s & {'tcp_data_queue', 'tcp_rcv_established'}:
            return 'lab: waking the end host (iperf) on TCP data'
        return 'waking another thread (other)'
    if s & {'__skb_gso_segment', 'skb_segment', 'skb_mac_gso_segment'}:
        return 'software GSO segmentation (the link\'s TUN has no USO)'
    if AEAD.search(leaf):
        return 'AEAD (AES-256-GCM)'
    if leaf in COPIES:
        return 'copies (the kernel\'s include the UDP checksum)'
    if s & {'tcp_v4_rcv', 'tcp_v6_rcv'}:
        return 'lab: kernel TCP receive of the end host / server socket, in the edge\'s context'
    if kernel:
        if leaf != 'pvm_irq_enable':
            for fn, name in SYSCALLS:
                if fn in s:
                    return 'kernel work in ' + name
        if 'do_syscall_64' in s:
            return 'system calls: entry and exit, other calls'
        return 'kernel: interrupts, other'
    if leaf.startswith(('internal/runtime/syscall', 'syscall.')):
        return 'system calls: the trap, seen at its return to user space'
    if leaf.startswith('gvisor.dev'):
        return 'gVisor netstack'
    if leaf.startswith(('runtime.', 'internal/', 'sync')):
        return 'Go runtime (scheduler, channels, locks, timers, pools, maps)'
    if leaf.startswith('github.com/wanopt'):
        return 'wanopt\'s own code'
    return 'other user code (Go\'s library, the vDSO clock)'


def chains(path):
    """Yields (symbols leaf first, whether the leaf is in the kernel)."""
    chain, kernel = [], False
    with open(path) as f:
        for line in f:
            parts = line.split(None, 1)
            if not parts:
                if chain:
                    yield chain, kernel
                chain = []
                continue
            if len(parts) == 2:
                sym, _, dso = parts[1].rstrip().rpartition(' (')
                if not chain:
                    kernel = dso.startswith('[kernel')
                chain.append(re.sub(r'\+0x[0-9a-f]+$', '', sym.strip()))
    if chain:
        yield chain, kernel


def main():
    runs = [a.split('=', 1) for a in sys.argv[1:]]
    if not runs:
        sys.exit(__doc__)
    for edge in ('near', 'far'):
        table, totals, samples = collections.defaultdict(dict), {}, {}
        for label, d in runs:
            row = json.load(open(f'{d}/cisco.json'))['rows'][0]
            totals[label] = row[f'{edge}_cpu_s_per_gb']
            counts = collections.Counter(classify(c, k) for c, k in chains(f'{d}/{edge}.script'))
            samples[label] = n = sum(counts.values())
            for cls, k in counts.items():
                table[cls][label] = totals[label] * k / n
        print(f'== {edge} edge: CPU-seconds per GB by cause')
        print('  ' + '  '.join(f'{lab:>6}' for lab, _ in runs) + '   (command total; samples)')
        print('  ' + '  '.join(f'{totals[lab]:6.2f}' for lab, _ in runs) + '   total: ' +
              ', '.join(f'{samples[lab]}' for lab, _ in runs) + ' samples')
        for cls, d in sorted(table.items(), key=lambda kv: -sum(kv[1].values())):
            if max(d.values()) >= 0.005:
                print('  ' + '  '.join(f'{d.get(lab, 0):6.2f}' for lab, _ in runs) + '   ' + cls)
        print()


if __name__ == '__main__':
    main()
