// Package wire is the byte encoding of wanopt's tunnel: packet headers and
// the frames inside a packet's payload. It is a codec only, with no state:
// the connection state machine (package tunnel) decides what to send and the
// AEAD (package tunnel/crypt) seals and opens payloads.
//
// # Packets
//
// A tunnel packet is one UDP datagram. Its first byte is the packet type.
// All multi-byte fixed-size integers are big endian.
//
//	handshake initiation  0x01 | sender index (4) | Noise message | mac1 | mac2
//	handshake response    0x02 | sender index (4) | receiver index (4) | Noise message
//	reject                0x03 | sender index (4)
//	cookie reply          0x04 | receiver index (4) | sealed cookie
//	data                  0x10|(L-1) | receiver index (4) | packet number (L = 1..4) | sealed frames
//
// Session indexes are chosen by each peer for itself, as in WireGuard: the
// initiator sends its index, the responder answers with its own and
// echoes the initiator's, and from then on each side addresses data
// packets to the other's index. The index, not the UDP address, finds the
// session, so a peer may roam between addresses.
//
// A data packet's header (1+4+L bytes, 6 to 9) is the AEAD's additional
// data and the sealed payload, ending with the AEAD tag, starts right
// after it (ParseHeader returns that offset).
//
// Packet numbers start at 0, increase by one per packet and are never
// reused; a retransmission is a new packet. The full 64-bit number (at
// most MaxVarint) is the AEAD nonce. Only its L low bytes are sent: the
// sender picks L with PacketNumberLen to cover more than twice the
// packets not yet acknowledged, and the receiver recovers the full number
// with DecodePacketNumber relative to the largest it has authenticated
// (RFC 9000 §17.1 and appendix A). A wrongly decoded number yields the
// wrong nonce, so the packet fails authentication and is dropped, never
// misaccepted. The number is not encrypted (no QUIC-style header
// protection), as in WireGuard.
//
// A reject is unauthenticated: a hint that the sender has no session for
// the index, which must never end a session by itself.
//
// # Frames
//
// A data packet's opened payload is a sequence of frames. Each starts with a
// one-byte type; integer fields are QUIC varints (RFC 9000 §16: 1, 2, 4 or 8
// bytes, the two high bits of the first byte giving the length, values up to
// 2^62-1). Layouts ("v" is a varint):
//
//	0x00       PADDING              (a run of zero bytes)
//	0x01       PING
//	0x02/0x03  ACK                  largest v, ack delay µs v, range count v, first range v,
//	                                {gap v, range length v}..., [ECT0 v, ECT1 v, CE v if 0x03]
//	0x04       RESET_STREAM         stream v, error code v, final size v
//	0x05       STOP_SENDING         stream v, error code v
//	0x08-0x0f  STREAM               stream v, [offset v if 0x04], [length v if 0x02], data;
//	                                0x01 = FIN; without 0x02 the data fills the packet
//	0x10       MAX_DATA             maximum v
//	0x11       MAX_STREAM_DATA      stream v, maximum v
//	0x14       DATA_BLOCKED         limit v
//	0x15       STREAM_DATA_BLOCKED  stream v, limit v
//	0x1c       CLOSE                code v, reason length v (<= 256), reason
//	0x20       STREAM_OPEN          stream v, protocol (1), source, destination;
//	                                address = length (1: 0, 4 or 16), address, port (2)
//	0x21       OPEN_RESULT          stream v, code v
//	0x30/0x31  DATAGRAM             [length v if 0x31], data; without length it fills the packet
//
// Numbers match QUIC's frames where QUIC has one. A STREAM frame that
// fills its packet costs as little as 2 bytes (type and a stream ID below
// 64, no offset at offset 0, no length); a nonzero offset adds 1 to 8
// bytes. A full bulk-data packet carries 7 (header, 2-byte packet number)
// + 6 (STREAM) + 16 (AEAD tag) = 29 bytes of tunnel overhead.
//
// # Buffers and errors
//
// Encoders are Append functions and methods, in the style of strconv: they
// append to the caller's slice and allocate only when it lacks capacity.
// EncodedLen, MaxStreamDataLen and MaxDatagramDataLen let a sender fill a
// packet exactly. Encoders panic on values no parser could produce (a
// varint above 2^62-1, invalid ACK ranges): those are bugs in the caller.
//
// Decoding (ParseHeader, Parser) does not allocate either, except to build
// an error. Decoded frames alias their input: STREAM and DATAGRAM data and
// CLOSE reasons point into the payload, ACK ranges into the Parser. Bytes
// from the network never cause a panic or an allocation proportional to a
// length field: malformed input returns an error wrapping one of the
// package's sentinel errors (ErrTruncated, ErrUnknownFrame, ...).
package wire
