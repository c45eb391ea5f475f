//! `vmscale`: everything but SQL over exported runs, which `vmscale-sql` answers.

fn main() {
    vmscale_cli::main()
}
