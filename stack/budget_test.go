package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/tcptest"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// TestBudgetAdmitsAndRefuses: with a budget of one flow, a second client
// is refused at once with a RST while the first is open, and admitted once
// it has closed; the first moves its bytes intact through buffers that
// start at their floors and grow with a grant, which it gives back.
func TestBudgetAdmitsAndRefuses(t *testing.T) {
	const down, up = 4 << 20, 1 << 20
	b := flow.NewBudget(1, 64<<10, 16<<20)
	data := tcptest.Payload(5, down)
	far := newGenFar(data, make(chan int, 1))
	cli, st, _ := lossyPair(t, far, Config{Budget: b,
		ReceiveBuffer: BufferRange{4 << 10, 16 << 10, 1 << 20},
		SendBuffer:    BufferRange{4 << 10, 16 << 10, 2 << 20}}, 0, 1)

	c := dialThrough(t, cli)
	waitFor(t, "the first flow admitted", func() bool { return b.Stats().Flows == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := gonet.DialContextTCP(ctx, cli, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 2, 2}), Port: 80}, ipv4.ProtocolNumber)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("second flow beyond the budget: err %v (ctx %v), want a refusal at once", err, ctx.Err())
	}
	if s := st.Stats(); s.OverBudget != 1 || b.Stats().FlowsRefused != 1 {
		t.Fatalf("over budget %d, budget refusals %d; want 1 and 1", s.OverBudget, b.Stats().FlowsRefused)
	}

	// The first flow streams both ways.
	far.gate <- down
	sent := tcptest.Payload(6, up)
	go func() { c.Write(sent); c.CloseWrite() }()
	got, err := io.ReadAll(io.LimitReader(c, down))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("download: %d bytes, err %v", len(got), err)
	}
	waitFor(t, "the upload at the far side", func() bool {
		far.mu.Lock()
		defer far.mu.Unlock()
		return far.up == up
	})
	far.mu.Lock()
	sum := far.h.Sum(nil)
	far.mu.Unlock()
	if want := sha256.Sum256(sent); !bytes.Equal(sum, want[:]) {
		t.Fatal("upload corrupted")
	}
	if s := b.Stats(); s.GrantsRefused != 0 || s.Grants < 2 {
		t.Errorf("grants: %+v; want one each way at least, none refused", s)
	}
	far.gate <- 0
	c.Close()
	waitFor(t, "the flow's floor and grants back", func() bool {
		s := b.Stats()
		return s.Flows == 0 && s.GrantedBytes == 0
	})
	// Admitted again: the stack dials the far side (whose data has ended,
	// so the new flow ends at once; only its admission matters here).
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if c, err := gonet.DialContextTCP(ctx2, cli, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 2, 2}), Port: 80}, ipv4.ProtocolNumber); err == nil {
		c.Close()
	}
	waitFor(t, "the second flow dialled", func() bool { return st.Stats().Dialed == 2 })
	if n := b.Stats().FlowsRefused; n != 1 {
		t.Errorf("%d refusals; want only the one while the first flow was open", n)
	}
}
