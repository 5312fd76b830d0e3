package packet

// Sender is a tunnel that carries datagrams (a *driver.Tunnel).
type Sender interface {
	SendDatagram(p []byte) error
	MaxDatagramBytes() int
}
