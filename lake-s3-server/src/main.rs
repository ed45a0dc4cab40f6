//! An S3-protocol server for the shared-lake tests: `s3s-fs`'s filesystem-backed S3 service
//! (buckets are directories of `ROOT`), served on loopback. It is `s3s-fs`'s own binary but for
//! one thing: every connection has `TCP_NODELAY`. Without it a response's body waits for the
//! client's delayed acknowledgement of its headers (Nagle's algorithm), about 40 ms per
//! request on Linux, which no real object store adds and which would make every lake request
//! look that slow.

use std::path::PathBuf;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

/// Serves the S3 protocol over a directory.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port to listen on.
    #[arg(long)]
    port: u16,
    /// The access key requests must be signed with.
    #[arg(long)]
    access_key: String,
    /// The secret key requests must be signed with.
    #[arg(long)]
    secret_key: String,
    /// The directory holding the buckets.
    root: PathBuf,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let fs = s3s_fs::FileSystem::new(&args.root)
        .map_err(|e| format!("cannot serve {}: {e:?}", args.root.display()))?;
    let mut service = S3ServiceBuilder::new(fs);
    service.set_auth(SimpleAuth::from_single(args.access_key, args.secret_key));
    let service = service.build();
    let listener = TcpListener::bind((args.host.as_str(), args.port)).await?;
    let http = Builder::new(TokioExecutor::new());
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // A connection that failed before it was accepted (reset, say) is the client's.
            Err(e) => {
                eprintln!("accepting a connection failed: {e}");
                continue;
            }
        };
        socket.set_nodelay(true)?;
        let connection = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            // A connection the client dropped mid-request ends here; nothing to do.
            let _ = connection.await;
        });
    }
}
