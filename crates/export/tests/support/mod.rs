pub mod parquet_rows;
