//! How a command fails: one line for the user and an exit code.

/// Exit codes: 2 for a request that cannot work as asked (usage), 1 for a failure while
/// running, 130 when interrupted, as shells expect after SIGINT.
pub const EXIT_RUNTIME: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub exit_code: i32,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            exit_code: EXIT_USAGE,
        }
    }

    pub fn runtime(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            exit_code: EXIT_RUNTIME,
        }
    }

    /// Running out of file descriptors, wherever it happened, is a request this host cannot
    /// satisfy as it is set up (exit 2, as the README promises), and the line says which
    /// limit and how to raise it.
    pub fn named_limits(self) -> Failure {
        let out_of_fds = ["(os error 24)", "(os error 23)"]
            .iter()
            .any(|errno| self.message.contains(errno));
        if !out_of_fds || self.exit_code != EXIT_RUNTIME {
            return self;
        }
        let (soft, _) = vmscale_kvm::preflight::fd_limits();
        Failure::usage(format!(
            "{}: too few file descriptors (RLIMIT_NOFILE is {soft}; raise it with `ulimit -n`)",
            self.message
        ))
    }
}

impl From<vmscale_scenario::Error> for Failure {
    fn from(e: vmscale_scenario::Error) -> Failure {
        let exit_code = match &e {
            vmscale_scenario::Error::Interrupted => EXIT_INTERRUPTED,
            e if e.is_usage() => EXIT_USAGE,
            _ => EXIT_RUNTIME,
        };
        let message = match &e {
            vmscale_scenario::Error::Interrupted => {
                "interrupted: every VM was torn down, nothing was written".to_string()
            }
            e => e.to_string(),
        };
        Failure { message, exit_code }
    }
}

impl From<vmscale_kvm::Error> for Failure {
    fn from(e: vmscale_kvm::Error) -> Failure {
        vmscale_scenario::Error::from(e).into()
    }
}

impl From<vmscale_run::LoadError> for Failure {
    fn from(e: vmscale_run::LoadError) -> Failure {
        Failure::runtime(e.to_string())
    }
}

/// An I/O error with no better context (renaming a finished output into place).
impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::runtime(e.to_string())
    }
}
