package childproc

import "syscall"

func killWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
