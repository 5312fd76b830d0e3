package nsenter

var ErrGoexit = errGoexit
