package crypt

import (
	"runtime"

	"golang.org/x/sys/cpu"
)

// hasAESHardware reports whether the CPU has the instructions Go's
// AES-GCM uses (AES rounds and carry-less multiplication).
func hasAESHardware() bool {
	switch runtime.GOARCH {
	case "amd64":
		return cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ
	case "arm64":
		return cpu.ARM64.HasAES && cpu.ARM64.HasPMULL
	case "s390x":
		return cpu.S390X.HasAES && cpu.S390X.HasGHASH
	}
	return false
}
