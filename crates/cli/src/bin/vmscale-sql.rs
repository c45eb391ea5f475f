//! `vmscale-sql`: `vmscale query` and `vmscale fleet`, with the embedded SQL engine, run
//! by `vmscale` with the same command line.

fn main() {
    vmscale_cli::sql_main()
}
