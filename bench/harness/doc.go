// Package harness runs things in a lab (bench/lab): pairs of wanopt edges
// (StartEdges), a hub and its branches (StartHub), iperf 2 servers and
// clients (StartIperfServer, RunIperf), nginx and curl (StartNginx, Fetch),
// tcpdump captures (StartCapture, CountZeroWindows), the endpoints' TCP
// settings (ApplyTCP) and the edges' CPU time and memory read from /proc.
// The experiments (bench/exp) and the product's end-to-end tests share it;
// it draws no charts and knows no experiment, so those tests do not pull
// in either. Package labtest holds what the lab's tests share.
package harness
