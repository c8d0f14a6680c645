package blobstore

import "syscall"

// noFollow makes open fail on a symlink (a staged file swapped for a link
// after Lstat is refused, not followed).
const noFollow = syscall.O_NOFOLLOW
